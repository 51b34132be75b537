//! `dronelab-report`: the tuning run's report. `report.json` (its schema in the loadtest
//! README; read back by the same types), `report.md` (the measured rows beside the
//! study's) and `report.html` (charts drawn as inline SVG: nothing is fetched, it opens
//! offline).
//!
//! - [`model`]: what the report holds, stage by stage;
//! - [`resources`]: CPU and memory per component, and how a stage's samples sum up;
//! - [`lab`]: the antipattern lab's confusion matrix and side-by-side pairs;
//! - [`criteria`]: pass/fail thresholds (`--threshold`, k6's meaning), their verdicts and JUnit XML;
//! - [`compare`]: two runs side by side, each difference tested against noise;
//! - [`block_bootstrap`]: the block bootstrap `compare` tests differences with;
//! - [`interval_latencies`]: percentiles of any of a stage's seconds, merged;
//! - [`capacity`]: each stage's knee at the latency objective, measured and predicted;
//! - [`spans`]: whether a stage's spans reached the trace store;
//! - `markdown`, `html`, `svg`: the two readable forms and the charts.

pub mod block_bootstrap;
pub mod capacity;
pub mod compare;
pub mod criteria;
mod html;
pub mod interval_latencies;
pub mod lab;
mod markdown;
pub mod model;
pub mod regression;
pub mod resources;
pub mod run_units;
pub mod spans;
mod svg;

use std::path::Path;

pub use model::{CosmosFigures, CosmosMeasured, CosmosSample, Machine, Report, StageReport};

impl Report {
    /// Writes the three files into `dir` and points `reports/latest` at it.
    pub fn write(&self, dir: &Path, reports: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("report.json"), json)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        std::fs::write(dir.join("report.html"), html::render(self))?;
        let latest = reports.join("latest");
        let _ = std::fs::remove_file(&latest);
        #[cfg(unix)]
        if let Some(name) = dir.file_name() {
            std::os::unix::fs::symlink(name, &latest)?;
        }
        Ok(())
    }

    /// The stages that searched for their knee, with their capacity figures.
    fn capacities(&self) -> Vec<(&str, &capacity::CapacityFigures)> {
        self.stages
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.capacity.as_ref()?)))
            .collect()
    }

    /// The capacity table as Markdown ("" when no stage searched for its knee).
    pub fn capacity_markdown(&self) -> String {
        capacity::markdown(&self.capacities())
    }

    /// The capacity charts as HTML ("" when no stage searched for its knee).
    pub fn capacity_html(&self) -> String {
        capacity::html(&self.capacities())
    }

    /// Reads `report.json` from a run's directory.
    pub fn read(dir: &Path) -> Result<Report, String> {
        let path = dir.join("report.json");
        let json = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&json).map_err(|e| format!("{}: {e}", path.display()))
    }
}
