//! `loadtest compare` on real runs: two quick tuning runs of the same two stages are
//! not significantly different on any figure, while stage 2 (serial fan-out) and stage
//! 3 (parallel) of one run differ significantly in throughput and latency.

use std::path::{Path, PathBuf};
use std::process::Command;

fn loadtest(args: &[&str], extra: &[&Path]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(args)
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("loadtest runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The run directories under `reports`, oldest first.
fn runs(reports: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(reports)
        .expect("reports")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "latest"))
        .collect();
    runs.sort();
    runs
}

/// The verdict of each figure line of `compare`'s output: (figure, significant).
fn verdicts(text: &str) -> Vec<(String, bool)> {
    text.lines()
        .filter(|l| l.ends_with("significant") || l.ends_with("too few samples"))
        .map(|l| {
            let figure = l.trim_start().split("  ").next().unwrap_or_default();
            (
                figure.to_owned(),
                !l.ends_with("not significant") && l.ends_with("significant"),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs minutes: two quick tuning runs of two stages (run by .ci/run)"]
fn a_repeat_is_not_significant_and_parallel_queries_are() {
    let dir = tempfile::tempdir().expect("dir");
    let reports = dir.path().join("reports");
    let tune = [
        "tune",
        "--profile",
        "quick",
        "--owners",
        "300",
        "--only",
        "2-more-ru,3-parallel",
        "--reports",
    ];
    loadtest(&tune, &[&reports]);
    // Run ids have one-second resolution.
    std::thread::sleep(std::time::Duration::from_secs(1));
    loadtest(&tune, &[&reports]);
    let [a, b] = runs(&reports).try_into().expect("two runs");

    let repeat = loadtest(&["compare"], &[&a, &b]);
    let figures = verdicts(&repeat);
    assert_eq!(figures.len(), 16, "eight figures of two stages:\n{repeat}");
    assert!(
        figures.iter().all(|(_, significant)| !significant),
        "a repeat differs nowhere:\n{repeat}"
    );
    assert!(b
        .join(format!(
            "compare-{}.html",
            a.file_name().unwrap_or_default().to_string_lossy()
        ))
        .exists());

    // Stages 2 and 3 differ in their query parallelism: refused unless asked for.
    let refused = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["compare", "--stages", "2-more-ru:3-parallel"])
        .args([&a, &a])
        .output()
        .expect("loadtest runs");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("stage settings: A "), "{said}");
    let stages = loadtest(
        &[
            "compare",
            "--allow-different",
            "--stages",
            "2-more-ru:3-parallel",
        ],
        &[&a, &a],
    );
    let significant: Vec<&str> = verdicts(&stages)
        .iter()
        .filter(|(_, s)| *s)
        .map(|(f, _)| match f.as_str() {
            "throughput (req/s)" => "throughput",
            "p50 (ms)" => "p50",
            "p99 (ms)" => "p99",
            _ => "other",
        })
        .filter(|f| *f != "other")
        .collect();
    assert_eq!(significant, ["throughput", "p50", "p99"], "{stages}");
}
