//! `--threshold` and `--junit` on `run`, `tune` and `lab`: the thresholds are judged after
//! the report is written, every verdict is printed with its measured value, and the
//! command fails naming the criteria that did not hold (the judging itself is
//! `dronelab_report::criteria`).

use std::path::PathBuf;

use dronelab_report::criteria::{self, judge, junit_xml, Criterion, Figure, Figures};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct CriteriaArgs {
    /// A threshold that must hold, as k6's thresholds mean it (repeatable): `p99<1000ms`,
    /// `errors<1%`, `rps>50`, or for one stage `4-partition-key:p99<200ms`. Figures: avg,
    /// p50, p90, p95, p99, max (end-to-end, ms or s), errors (failed or shed, %), rps,
    /// and where Cosmos DB is measured (tune, lab, capacity) throttled (429s, %) and ru
    /// (per operation); `knee>=N` (capacity: the highest rate met, req/s) and
    /// `diagnosis=expected` (lab: the diagnosis named what the stage expects). The
    /// report is written either way; if one does not hold, the command exits 1 naming it.
    #[arg(long = "threshold", value_name = "EXPR")]
    pub thresholds: Vec<Criterion>,
    /// Renamed `--threshold`: it states what must hold, as k6's thresholds do, while
    /// Azure Load Testing's "fail on" criteria state what fails. Refused with that said,
    /// so that no expression is read with the other meaning.
    #[arg(long = "fail-on", value_name = "EXPR", hide = true)]
    pub renamed_fail_on: Vec<String>,
    /// Write the verdicts as JUnit XML (one test case per criterion and stage).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

impl CriteriaArgs {
    /// For `loadtest run`: one unnamed run, no Cosmos DB figures.
    pub fn check_for_run(&self) -> Result<(), String> {
        self.check_not_renamed()?;
        for criterion in &self.thresholds {
            if criterion.stage.is_some() {
                return Err(format!(
                    "--threshold {criterion}: `run` has no stages; drop the stage"
                ));
            }
            if criterion.figure.only_with_stages() {
                return Err(format!(
                    "--threshold {criterion}: {} is measured by `tune`, `lab` or `capacity`, not by `run`",
                    criterion.figure.name()
                ));
            }
        }
        Ok(())
    }

    /// Refuses `--fail-on`, naming its new name and why it changed.
    fn check_not_renamed(&self) -> Result<(), String> {
        match self.renamed_fail_on.first() {
            Some(expr) => Err(format!(
                "--fail-on {expr}: renamed --threshold, which states what must hold (k6's meaning; Azure Load Testing's fail criteria state what fails): write --threshold '{expr}' if it must hold"
            )),
            None => Ok(()),
        }
    }

    /// Refuses a criterion for a stage that will not run, and one on the knee when no
    /// knee is searched (`capacity` is false).
    pub fn check_stages<'a>(
        &self,
        stages: impl Iterator<Item = &'a str> + Clone,
        capacity: bool,
    ) -> Result<(), String> {
        self.check_not_renamed()?;
        if let Some(knee) = self
            .thresholds
            .iter()
            .find(|c| c.figure == Figure::Knee && !capacity)
        {
            return Err(format!(
                "--threshold {knee}: the knee is measured by `loadtest capacity`, not by a step load"
            ));
        }
        criteria::check_stages(&self.thresholds, stages)
    }

    /// Judges the criteria on `stages`, prints each verdict (on stderr when stdout
    /// carries data), writes the JUnit file if asked; an error names every failure.
    pub fn enforce(
        &self,
        suite: &str,
        stages: &[(&str, Figures)],
        to_stderr: bool,
    ) -> Result<(), String> {
        let verdicts = judge(&self.thresholds, stages);
        if !verdicts.is_empty() {
            let lines: Vec<String> = verdicts.iter().map(|v| format!("  {v}")).collect();
            let text = format!("criteria:\n{}", lines.join("\n"));
            if to_stderr {
                eprintln!("{text}");
            } else {
                println!("{text}");
            }
        }
        if let Some(path) = &self.junit {
            std::fs::write(path, junit_xml(suite, &verdicts))
                .map_err(|e| format!("writing --junit {}: {e}", path.display()))?;
        }
        criteria::failures(&verdicts, "criteria")
    }
}
