//! `loadtest merge`: combines the records of a run's shards into one, exactly (HDR
//! histograms added, counts summed, seconds aligned on the common start).

use std::path::{Path, PathBuf};

use super::run::{print_summary, write_json};
use loadgen::LoadRecord;

#[derive(clap::Args)]
pub struct MergeArgs {
    /// The shards' records (`run --record`), or their pods' logs: the last line that is
    /// a record counts.
    #[arg(required = true)]
    pub records: Vec<PathBuf>,
    /// Write the merged summary (JSON) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the merged record here (`-`: stdout).
    #[arg(long)]
    pub record: Option<PathBuf>,
}

pub fn merge(args: MergeArgs) -> Result<(), String> {
    let records = args
        .records
        .iter()
        .map(|path| read_record(path))
        .collect::<Result<Vec<_>, _>>()?;
    let shards = records.len();
    let merged = LoadRecord::merge(records).map_err(|e| e.to_string())?;
    let summary = merged.summary();
    eprintln!("merged {shards} shards");
    print_summary(&summary, args.record.as_deref() == Some(Path::new("-")));
    if let Some(path) = &args.out {
        write_json(path, &summary)?;
    }
    if let Some(path) = &args.record {
        write_json(path, &merged)?;
    }
    Ok(())
}

/// A record file, or a log whose last record line is taken (a pod's log holds its
/// stderr lines too).
pub fn read_record(path: &Path) -> Result<LoadRecord, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    LoadRecord::from_log(&text).map_err(|e| format!("{}: {e}", path.display()))
}
