//! `loadtest capacity --profile quick` on the local stack: every stage keeps to its time
//! cap, each knee is a bracket whose lower end ran twice, the knees order as the stages
//! do, stage 1 is limited by its RU budget, the capacity curve has its objectives, no
//! modelled bound is named as measured, and a criterion is judged at the knee.

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
            "--threshold",
            "4-partition-key:knee>=100",
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
        // The search starts at the calibration's rate, not at the prediction.
        assert_eq!(c.steps[0].rate_rps, 2.0, "{:?}", c.steps);
        let met = c.bracket.met_rps.expect("a rate met");
        if !c.capped {
            let runs = c.steps.iter().filter(|s| s.rate_rps == met).count();
            assert_eq!(runs, 2, "the knee's step ran twice: {:?}", c.steps);
            assert!(c.steps.iter().any(|s| s.repeat && s.rate_rps == met));
        }
        if let Some(missed) = c.bracket.missed_rps {
            assert!(met < missed, "{:?}", c.bracket);
        }
        assert!(
            c.model_source.starts_with("read from the emulator"),
            "{}",
            c.model_source
        );
        // Only measured evidence is named as saturated.
        assert_ne!(c.saturated, Resource::PartitionConcurrency, "{c:?}");
        assert!(c.curve.len() >= 3, "{:?}", c.curve);
        let own = c
            .curve
            .iter()
            .find(|p| p.objective_p99_ms == c.slo_p99_ms)
            .expect("own objective");
        assert_eq!(
            own.max_rps, c.bracket.met_rps,
            "the curve agrees with the knee"
        );
        // A looser objective never holds less.
        for pair in c.curve.windows(2) {
            assert!(
                pair[0].max_rps.unwrap_or(0.0) <= pair[1].max_rps.unwrap_or(0.0),
                "{:?}",
                c.curve
            );
        }
    }
    // Stack start, seeding and the report beyond the caps: a minute is ample.
    assert!(wall < caps + Duration::from_secs(120), "{wall:?}");

    let knee = |i: usize| stages[i].bracket.met_rps.unwrap_or(0.0);
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
        markdown.contains("## Capacity at p99 ≤ 2000 ms")
            && markdown.contains("### Capacity curve"),
        "{markdown}"
    );
    // The report's schema: the bracket and the curve by these names.
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(reports.join("latest/report.json")).expect("json"),
    )
    .expect("report.json parses");
    let capacity = &json["stages"][0]["capacity"];
    assert!(capacity["bracket"]["met_rps"].is_number(), "{capacity}");
    assert!(
        capacity["bracket"].get("missed_rps").is_some(),
        "{capacity}"
    );
    assert!(
        capacity["curve"][2]["objective_p99_ms"].is_number(),
        "{capacity}"
    );
    assert!(capacity["curve"][2].get("max_rps").is_some(), "{capacity}");
    let html = std::fs::read_to_string(reports.join("latest/report.html")).expect("html");
    assert!(
        html.contains("p99 (ms) by arrival rate"),
        "a hockey stick per stage"
    );
    let junit = std::fs::read_to_string(&junit).expect("junit");
    let doc = roxmltree::Document::parse(&junit).expect("JUnit parses");
    let cases = doc.descendants().filter(|n| n.has_tag_name("testcase"));
    assert_eq!(cases.count(), 2, "{junit}");
    assert!(
        !junit.contains("<failure"),
        "stage 4 holds 100 req/s: {junit}"
    );
}
