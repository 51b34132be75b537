//! The main job end to end: `loadtest tune --profile quick` from the real binary, which
//! starts the whole local stack as separate processes (trace viewer included), seeds it,
//! runs four stages, and diagnoses each stage from the traces the real services exported.

use std::process::Command;

use serde_json::Value;

#[test]
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

    let report: Value =
        serde_json::from_slice(&std::fs::read(latest.join("report.json")).expect("json"))
            .expect("valid json");
    let stages = report["stages"].as_array().expect("stages array");
    assert_eq!(stages.len(), 4);
    for stage in stages {
        for key in [
            "name",
            "config",
            "requests",
            "successful_requests",
            "failed_requests",
            "throughput_rps",
        ] {
            assert!(!stage[key].is_null(), "stage has {key}");
        }
        for key in ["avg", "p50", "p90", "p95", "p99", "max"] {
            assert!(stage["latency_ms"][key].is_number(), "latency_ms.{key}");
            assert!(
                stage["utilization_latency_ms"][key].is_number(),
                "utilization_latency_ms.{key}"
            );
        }
        for key in [
            "requests",
            "throttled_requests",
            "ru_total",
            "ru_per_operation",
            "calls_per_operation",
            "max_ru_per_partition_per_sec",
            "provisioned_ru_per_partition",
        ] {
            assert!(stage["cosmos"][key].is_number(), "cosmos.{key}");
        }
        assert!(
            stage["successful_requests"].as_u64().unwrap_or(0) > 0,
            "{}",
            stage["name"]
        );
    }
    let cosmos = |i: usize, key: &str| stages[i]["cosmos"][key].as_f64().unwrap_or(f64::NAN);
    assert!(
        cosmos(0, "throttled_requests") > 0.0,
        "stage 1 is throttled"
    );
    assert_eq!(cosmos(1, "throttled_requests"), 0.0, "stage 2 is not");
    assert!(
        (cosmos(3, "calls_per_operation") - 1.0).abs() < 0.05,
        "stage 4: one call per operation"
    );
    assert!(
        cosmos(2, "ru_per_operation") >= 5.0 * cosmos(3, "ru_per_operation"),
        "the partition key cuts RU per operation at least 5×"
    );

    // The diagnosis of each stage, from the real stack's traces.
    let verdicts: Vec<&str> = stages
        .iter()
        .map(|s| {
            s["diagnosis"]["findings"][0]["kind"]
                .as_str()
                .unwrap_or("none")
        })
        .collect();
    // Stage 4 has no Cosmos bottleneck left; on a busy machine its CPU may be the limit,
    // and then the measurement must show it.
    let stage4 = &stages[3];
    if verdicts[3] == "cpu_limit" {
        let r = &stage4["resources"];
        let hottest = r["components"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["hottest_thread_cores"].as_f64())
            .fold(0.0, f64::max);
        assert!(
            r["machine_cpu_sustained_share"].as_f64().unwrap_or(0.0) >= 0.85 || hottest >= 0.85,
            "a CPU verdict needs a saturated CPU: {r}"
        );
    } else {
        let evidence = stage4["diagnosis"]["findings"][0]["evidence"]
            .as_str()
            .unwrap_or("");
        assert!(evidence.contains("CPU is not the limit"), "{evidence}");
    }
    assert_eq!(
        verdicts[..3],
        ["throttling", "serial_fan_out", "cross_partition_cost"],
        "{}",
        serde_json::to_string_pretty(&stages.iter().map(|s| &s["diagnosis"]).collect::<Vec<_>>())
            .unwrap_or_default()
    );
    let evidence = |i: usize, key: &str| {
        stages[i]["diagnosis"]["cosmos"][key]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    assert!(
        evidence(0, "retry_wait_share") > 0.0,
        "stage 1 loses time to 429 retries"
    );
    assert_eq!(
        evidence(1, "fan_out_concurrency_p50"),
        1.0,
        "stage 2 is a serial fan-out"
    );
    assert!(
        evidence(2, "fan_out_concurrency_p50") >= 3.0,
        "stage 3 fans out in parallel"
    );
    assert!(
        evidence(2, "partition_ranges_per_operation") >= 8.0,
        "nine partitions queried"
    );
    assert_eq!(
        evidence(3, "partition_ranges_per_operation"),
        1.0,
        "stage 4: one partition"
    );
    for stage in stages {
        assert_eq!(
            stage["diagnosis"]["dominant_backend"].as_str(),
            Some("utilization-service"),
            "{}",
            stage["name"]
        );
        let link = stage["trace_links"]["typical"].as_str().unwrap_or_default();
        assert!(
            link.starts_with("http://127.0.0.1:") && link.contains("/trace/"),
            "{link}"
        );
    }
    // CPU and memory of every process of the stack and of the load tool, per stage.
    for stage in stages {
        let components = stage["resources"]["components"]
            .as_array()
            .expect("resources");
        let usage = |name: &str| {
            components
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("{name} in {components:?}"))
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
            assert!(
                usage(name)["rss_max_mb"].as_f64().unwrap_or(0.0) > 1.0,
                "{name}"
            );
        }
        assert!(usage("gateway")["cpu_mean_cores"].as_f64().unwrap_or(0.0) > 0.0);
        assert!(usage("loadtest")["cpu_mean_cores"].as_f64().unwrap_or(0.0) > 0.0);
        assert!(
            stage["resource_series"].as_array().map_or(0, Vec::len) >= 10,
            "one sample a second"
        );
    }
    assert!(html.contains("CPU per component (cores)"));
    assert!(
        stages[0]["trace_links"]["throttled"].is_string(),
        "stage 1 links a trace with a 429"
    );
    let markdown = std::fs::read_to_string(latest.join("report.md")).expect("markdown");
    assert!(
        markdown.contains("**Serial cross-partition fan-out**")
            && markdown.contains("[trace with a 429]("),
        "the report carries the findings and the links"
    );
}
