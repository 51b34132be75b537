//! `loadtest capacity --profile quick` on the local stack: every stage keeps to its time
//! cap, the knees order as the stages do, stage 1 is limited by its RU budget, and a
//! criterion is judged at the knee.

use std::process::Command;
use std::time::{Duration, Instant};

use dronelab_report::Report;
use dronelab_study::capacity::Resource;

#[test]
#[ignore = "needs minutes: a quick capacity search of the four stages (run by .ci/run)"]
fn quick_capacity_orders_the_knees_within_each_stages_cap() {
    let dir = tempfile::tempdir().expect("dir");
    let reports = dir.path().join("reports");
    let junit = dir.path().join("capacity.xml");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["capacity", "--profile", "quick", "--owners", "300"])
        .args([
            "--target-rps",
            "100",
            "--threshold",
            "4-partition-key:errors<=1%",
        ])
        .arg("--reports")
        .arg(&reports)
        .arg("--junit")
        .arg(&junit)
        .env("RUST_LOG", "warn")
        .output()
        .expect("loadtest runs");
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "capacity failed:\n{stderr}");
    // The prediction is printed before the search, the knee after it.
    let predicted = stderr.find("predicted knee").expect("a prediction");
    let first_step = stderr.find("req/s offered").expect("a step");
    assert!(predicted < first_step, "{stderr}");

    let report = Report::read(&reports.join("latest")).expect("report.json");
    eprintln!("{}", report.capacity_markdown());
    let capacity = |name: &str| {
        report
            .stages
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.capacity.clone())
            .unwrap_or_else(|| panic!("{name} has capacity figures"))
    };
    let stages = ["1-baseline", "2-more-ru", "3-parallel", "4-partition-key"].map(capacity);
    let mut caps = Duration::ZERO;
    for c in &stages {
        assert_eq!(c.slo_p99_ms, 2000.0, "the default objective");
        assert!(
            c.elapsed_secs <= c.cap_secs,
            "{c:?} ran past its cap ({} > {} s)",
            c.elapsed_secs,
            c.cap_secs
        );
        caps += Duration::from_secs_f64(c.cap_secs);
        assert!(c.predicted_knee_rps > 0.0, "{c:?}");
        assert!(c.plan.is_some(), "--target-rps plans every stage");
        // Each step that met the objective kept its p99 and error rate within it.
        for step in &c.steps {
            let within = step.p99_ms <= c.slo_p99_ms && step.error_rate <= c.max_error_rate;
            assert_eq!(step.met, within, "{step:?}");
        }
    }
    // Stack start, seeding and the report beyond the caps: a minute is ample.
    assert!(wall < caps + Duration::from_secs(120), "{wall:?}");

    let knee = |i: usize| stages[i].max_rps_within_slo.unwrap_or(0.0);
    let (k1, k2, k3, k4) = (knee(0), knee(1), knee(2), knee(3));
    assert!(k1 > 0.0, "stage 1 holds some load within 2 s");
    // Wide margins: the search brackets a knee within 10 %, so 2 and 3 (the same
    // partitions' work, one serial, one parallel) may come out close.
    assert!(k2 > 1.3 * k1, "more RU/s lifts the knee: {k1} → {k2}");
    assert!(
        k3 >= 0.8 * k2,
        "parallel holds at least as much: {k2} → {k3}"
    );
    assert!(
        k4 > 2.0 * k3,
        "the partition key multiplies it: {k3} → {k4}"
    );
    // Stage 1 runs out of RU: its knee is near provisioned RU/s ÷ RU per operation.
    assert_eq!(stages[0].saturated, Resource::RuBudget, "{:?}", stages[0]);
    let ru_bound = stages[0]
        .predicted
        .bounds
        .iter()
        .find(|b| b.resource == Resource::RuBudget)
        .map(|b| b.rps)
        .expect("an RU budget bound");
    assert!(
        (k1 - ru_bound).abs() <= 0.25 * ru_bound,
        "{k1} vs {ru_bound}"
    );

    let markdown = std::fs::read_to_string(reports.join("latest/report.md")).expect("md");
    assert!(
        markdown.contains("## Capacity at p99 ≤ 2000 ms"),
        "{markdown}"
    );
    let html = std::fs::read_to_string(reports.join("latest/report.html")).expect("html");
    assert!(
        html.contains("p99 (ms) by arrival rate"),
        "a hockey stick per stage"
    );
    let junit = std::fs::read_to_string(&junit).expect("junit");
    let doc = roxmltree::Document::parse(&junit).expect("JUnit parses");
    let cases = doc.descendants().filter(|n| n.has_tag_name("testcase"));
    assert_eq!(cases.count(), 1, "{junit}");
}
