//! Lost spans are counted and reported: the quick tuning run's services export to a
//! collector that accepts connections and never answers (what a collector that fell
//! behind looks like from the service), so their export queues fill. Each service's
//! `/metrics` counts what it dropped, and the stage's report warns that the diagnosis
//! would read a thinner sample.

use std::net::TcpListener;
use std::process::Command;

use dronelab_report::Report;

#[test]
#[ignore = "needs a minute: one quick tuning stage (run by .ci/run)"]
fn a_stalled_collector_shows_as_lost_spans_in_the_report() {
    // Accepts and holds every connection, answers nothing.
    let collector = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", collector.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in collector.incoming().flatten() {
            held.push(stream);
        }
    });

    let dir = tempfile::tempdir().expect("dir");
    let reports = dir.path().join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["tune", "--profile", "quick", "--owners", "300"])
        .args(["--only", "4-partition-key", "--reports"])
        .arg(&reports)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
        .env("OTEL_BSP_MAX_QUEUE_SIZE", "64")
        .env("RUST_LOG", "warn")
        .output()
        .expect("loadtest runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "tune failed:\n{stderr}");
    assert!(stderr.contains("spans lost:"), "{stderr}");

    let report = Report::read(&reports.join("latest")).expect("report.json");
    let stage = &report.stages[0];
    let spans = stage.spans.as_ref().expect("span counters read");
    assert!(spans.lost() > 0, "{spans:?}");
    for service in &spans.services {
        // Nothing reached the collector; every span is accounted for as lost or queued.
        assert_eq!(service.exported, 0, "{service:?}");
        assert!(service.lost() <= service.ended, "{service:?}");
    }
    let gateway = spans
        .services
        .iter()
        .find(|s| s.service == "gateway")
        .expect("the gateway's spans");
    assert!(gateway.dropped > 0, "{gateway:?}");
    let markdown = std::fs::read_to_string(reports.join("latest/report.md")).expect("md");
    assert!(markdown.contains("**spans lost**"), "{markdown}");
}
