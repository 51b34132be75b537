//! The tuning run's report: `report.json` (its schema in the loadtest README),
//! `report.md` (the measured rows beside the study's) and `report.html` (charts drawn as
//! inline SVG: nothing is fetched, it opens offline).

mod html;
mod markdown;
mod model;
mod svg;

use std::path::Path;

pub use model::{CosmosFigures, CosmosSample, Machine, Report, StageReport};

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
}
