//! The main job end to end: `loadtest tune --profile quick` from the real binary, which
//! starts the whole local stack as separate processes (trace viewer included), seeds it,
//! runs four stages, and diagnoses each stage from the traces the real services exported.
//! The report is read back as the typed [`Report`] other tools read.

use std::process::Command;

use dronelab_report::{Report, StageReport};
use trace_analysis::diagnosis::{Diagnosis, FindingKind};

fn diagnosis(stage: &StageReport) -> &Diagnosis {
    stage
        .diagnosis
        .as_ref()
        .unwrap_or_else(|| panic!("stage {} was diagnosed", stage.name))
}

fn verdict(stage: &StageReport) -> FindingKind {
    diagnosis(stage)
        .verdict()
        .map(|f| f.kind)
        .unwrap_or_else(|| panic!("stage {} has a verdict", stage.name))
}

#[test]
#[ignore = "needs minutes: the whole quick tuning run (run by .ci/run)"]
fn quick_tuning_run_writes_a_report_with_the_study_shape() {
    let dir = tempfile::tempdir().expect("temp dir");
    let reports = dir.path().join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["tune", "--profile", "quick", "--owners", "300", "--reports"])
        .arg(&reports)
        .env("RUST_LOG", "warn")
        .output()
        .expect("loadtest runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "tune failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("| 1-baseline | measured |"), "{stdout}");

    let latest = reports.join("latest");
    for file in ["report.json", "report.md", "report.html"] {
        assert!(latest.join(file).is_file(), "{file} written");
    }
    let html = std::fs::read_to_string(latest.join("report.html")).expect("html");
    assert!(
        html.contains("<svg") && !html.contains("<script src"),
        "charts inline, no CDN"
    );
    assert!(html.contains("CPU per component (cores)"));

    let report = Report::read(&latest).expect("report.json is a Report");
    let stages = &report.stages;
    let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["1-baseline", "2-more-ru", "3-parallel", "4-partition-key"]
    );
    for stage in stages {
        assert!(stage.successful_requests > 0, "{}", stage.name);
        // Every service's spans were counted, and all of them reached the viewer.
        let spans = stage.spans.as_ref().expect("span counters read");
        assert_eq!(spans.services.len(), 4, "{spans:?}");
        assert!(spans.ended() > 4 * stage.successful_requests, "{spans:?}");
        assert_eq!(spans.lost(), 0, "{}: {spans:?}", stage.name);
        assert_eq!(
            stage.requests,
            stage.successful_requests + stage.failed_requests
        );
        let l = &stage.latency_ms;
        assert!(
            l.p50 <= l.p90 && l.p90 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max,
            "{l:?}"
        );
        assert!(stage.utilization_latency_ms.avg > 0.0, "{}", stage.name);
        assert!(
            stage.study.is_some(),
            "the published row beside {}",
            stage.name
        );
    }
    let cosmos = |i: usize| &stages[i].cosmos;
    assert!(cosmos(0).throttled_requests > 0, "stage 1 is throttled");
    assert_eq!(cosmos(1).throttled_requests, 0, "stage 2 is not");
    assert!(
        (cosmos(3).calls_per_operation - 1.0).abs() < 0.05,
        "stage 4: one call per operation"
    );
    assert!(
        cosmos(2).ru_per_operation >= 5.0 * cosmos(3).ru_per_operation,
        "the partition key cuts RU per operation at least 5×"
    );

    // The diagnosis of each stage, from the real stack's traces.
    let verdicts: Vec<FindingKind> = stages.iter().map(verdict).collect();
    assert_eq!(
        verdicts[..3],
        [
            FindingKind::Throttling,
            FindingKind::SerialFanOut,
            FindingKind::CrossPartitionCost
        ],
        "{:#?}",
        stages.iter().map(diagnosis).collect::<Vec<_>>()
    );
    // Stage 4 has no Cosmos bottleneck left; on a busy machine its CPU may be the limit,
    // and then the measurement must show it.
    let stage4 = &stages[3];
    let resources = stage4.resources.as_ref().expect("stage 4's resources");
    assert_eq!(verdicts[3], FindingKind::NoCosmosBottleneck);
    let stage4_kinds = diagnosis(stage4).kinds();
    if stage4_kinds.contains(&FindingKind::CpuLimit) {
        let hottest = resources
            .components
            .iter()
            .filter_map(|c| c.hottest_thread_cores)
            .fold(0.0, f64::max);
        assert!(
            resources.machine_cpu_sustained_share >= 0.85 || hottest >= 0.85,
            "a CPU finding needs a saturated CPU: {resources:?}"
        );
    } else if !stage4_kinds.contains(&FindingKind::BusyMachine) {
        let evidence = &diagnosis(stage4).findings[0].evidence;
        assert!(evidence.contains("CPU is not the limit"), "{evidence}");
    }
    // No knob is on in the study's stages, and no antipattern is named there (the
    // machine that measured may be: a CPU limit, or other work keeping it busy).
    for stage in stages {
        assert!(stage.knobs.is_empty(), "{}", stage.name);
        let named = diagnosis(stage).kinds();
        assert!(
            named.iter().all(|kind| kind.about().is_none()
                || matches!(kind, FindingKind::CpuLimit | FindingKind::BusyMachine)),
            "{}: an antipattern named in a study stage: {named:?}",
            stage.name
        );
    }
    let evidence = |i: usize| &diagnosis(&stages[i]).cosmos;
    assert!(
        evidence(0).retry_wait_share > 0.0,
        "stage 1 loses time to 429 retries"
    );
    assert_eq!(
        evidence(1).fan_out_concurrency_p50,
        1.0,
        "stage 2 is a serial fan-out"
    );
    assert!(
        evidence(2).fan_out_concurrency_p50 >= 3.0,
        "stage 3 fans out in parallel"
    );
    assert!(
        evidence(2).partition_ranges_per_operation >= 8.0,
        "nine partitions queried"
    );
    assert_eq!(
        evidence(3).partition_ranges_per_operation,
        1.0,
        "stage 4: one partition"
    );
    for stage in stages {
        assert_eq!(
            diagnosis(stage).dominant_backend.as_deref(),
            Some("utilization-service"),
            "{}",
            stage.name
        );
        let links = stage.trace_links.as_ref().expect("trace links");
        let link = links.typical.as_deref().unwrap_or_default();
        assert!(
            link.starts_with("http://127.0.0.1:") && link.contains("/trace/"),
            "{link}"
        );
    }
    assert!(
        stages[0]
            .trace_links
            .as_ref()
            .is_some_and(|l| l.throttled.is_some()),
        "stage 1 links a trace with a 429"
    );
    // CPU and memory of every process of the stack and of the load tool, per stage.
    for stage in stages {
        let resources = stage.resources.as_ref().expect("resources");
        let usage = |name: &str| {
            resources
                .components
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("{name} in {resources:?}"))
        };
        for name in [
            "gateway",
            "delivery-service",
            "package-service",
            "utilization-service",
            "cosmos-emulator",
            "trace-viewer",
            "loadtest",
        ] {
            assert!(usage(name).rss_max_mb > 1.0, "{name}");
        }
        assert!(usage("gateway").cpu_mean_cores > 0.0);
        assert!(usage("loadtest").cpu_mean_cores > 0.0);
        assert!(stage.resource_series.len() >= 10, "one sample a second");
    }
    let markdown = std::fs::read_to_string(latest.join("report.md")).expect("markdown");
    assert!(
        markdown.contains("**Serial cross-partition fan-out**")
            && markdown.contains("[trace with a 429]("),
        "the report carries the findings and the links"
    );
}

#[test]
fn a_local_run_refuses_stages_of_two_partition_counts_before_it_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stages = dir.path().join("stages");
    std::fs::create_dir(&stages).expect("stages dir");
    for (name, partitions) in [("1-nine", 9), ("2-three", 3)] {
        std::fs::write(
            stages.join(format!("{name}.toml")),
            format!(
                "description = \"d\"\nprovisioned_ru_per_second = 2500\npartitions = {partitions}\nquery_parallelism = 0\nuse_partition_key = false\n"
            ),
        )
        .expect("stage file");
    }
    let reports = dir.path().join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["tune", "--profile", "quick", "--stages"])
        .arg(&stages)
        .arg("--reports")
        .arg(&reports)
        .output()
        .expect("loadtest runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("stage 2-three asks for 3 partitions and 1-nine for 9"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("starting the local stack"),
        "refused before anything starts: {stderr}"
    );
}
