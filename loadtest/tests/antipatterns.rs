//! The antipattern lab end to end: each stage pair under `loadtest/stages/antipatterns`
//! run by the real binary on the quick profile against the whole local stack. The
//! antipattern stage is named by its own finding kind, its fix is not, and the fix
//! improves latency. The report is read back as the typed [`Report`].

use std::path::Path;
use std::process::Command;

use dronelab_report::Report;
use trace_analysis::diagnosis::FindingKind;

/// The pair's report, and its Markdown form.
fn run_pair(kind_dir: &str) -> (Report, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let reports = dir.path().join("reports");
    let stages = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("stages/antipatterns")
        .join(kind_dir);
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["tune", "--profile", "quick", "--owners", "300", "--stages"])
        .arg(&stages)
        .arg("--reports")
        .arg(&reports)
        .env("RUST_LOG", "warn")
        .output()
        .expect("loadtest runs");
    assert!(
        output.status.success(),
        "tune failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let latest = reports.join("latest");
    let markdown = std::fs::read_to_string(latest.join("report.md")).expect("report.md");
    (
        Report::read(&latest).expect("report.json is a Report"),
        markdown,
    )
}

#[test]
#[ignore = "needs minutes: a quick tuning run of the pair (run by .ci/run)"]
fn synchronous_io_is_named_and_its_fix_is_not() {
    let (report, markdown) = run_pair("synchronous-io");
    assert!(
        markdown.contains("antipattern lab knobs on: `UTILIZATION_AUDIT_WRITE=blocking`"),
        "{markdown}"
    );
    let [bad, fixed] = report.stages.as_slice() else {
        panic!("a pair of stages: {:?}", report.stages.len());
    };
    let kinds = |stage: &dronelab_report::StageReport| -> Vec<FindingKind> {
        stage
            .diagnosis
            .as_ref()
            .map(|d| d.findings.iter().map(|f| f.kind).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        kinds(bad).first(),
        Some(&FindingKind::SynchronousIo),
        "{:?}",
        bad.diagnosis
    );
    assert!(
        !kinds(fixed).contains(&FindingKind::SynchronousIo),
        "{:?}",
        fixed.diagnosis
    );
    assert!(
        bad.study.is_none() && fixed.study.is_none(),
        "no published row for lab stages"
    );
    assert_eq!(bad.knobs.get("UTILIZATION_AUDIT_WRITE"), Some("blocking"));
    // The signal itself, with wide margins: ≥ 5 ms of unexplained time against almost none.
    let unexplained = |stage: &dronelab_report::StageReport| {
        stage
            .diagnosis
            .as_ref()
            .and_then(|d| {
                d.backends
                    .iter()
                    .find(|b| b.service == "utilization-service")
            })
            .map(|b| b.unexplained_ms)
            .unwrap_or_default()
    };
    assert!(unexplained(bad) >= 5.0, "{}", unexplained(bad));
    assert!(
        unexplained(fixed) < unexplained(bad) / 5.0,
        "{}",
        unexplained(fixed)
    );
    assert!(
        fixed.latency_ms.p99 < bad.latency_ms.p99,
        "the fix lowers p99: {} vs {}",
        fixed.latency_ms.p99,
        bad.latency_ms.p99
    );
}
