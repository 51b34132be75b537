//! No dashboard with dead panels: a real Prometheus (Debian's `prometheus`), configured by
//! the shipped `dashboards/prometheus/local.yml`, scrapes the local stack while a short
//! load runs; then every PromQL expression of `dashboards/grafana/dronelab.json` must
//! return at least one series.
//!
//! It needs Debian's `prometheus` on the PATH, so it is ignored by `cargo test` and run by
//! `.ci/run` (`-- --ignored`), where a missing `prometheus` fails it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// Kills the child when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn prometheus_installed() -> bool {
    Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Every `expr` of every panel, in order.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_file("dashboards/grafana/dronelab.json"))
        .expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default().to_owned();
            queries.push((title, target["expr"].as_str().expect("expr").to_owned()));
        }
    }
    queries
}

/// The shipped configuration, pointed at this test's targets file and scraping every
/// second so a few seconds of load give rates.
fn prometheus_config(targets: &Path) -> String {
    let shipped = std::fs::read_to_string(repo_file("dashboards/prometheus/local.yml"))
        .expect("the local Prometheus configuration");
    let replacements = [
        (
            "../../reports/stack-logs/prometheus-targets.json",
            targets.display().to_string(),
        ),
        ("scrape_interval: 5s", "scrape_interval: 1s".to_owned()),
        ("scrape_timeout: 4s", "scrape_timeout: 1s".to_owned()),
        ("refresh_interval: 5s", "refresh_interval: 1s".to_owned()),
    ];
    let mut config = shipped;
    for (from, to) in replacements {
        assert!(config.contains(from), "local.yml has `{from}`");
        config = config.replace(from, &to);
    }
    config
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Series returned by an instant query (`None` if Prometheus refused it).
async fn series(http: &reqwest::Client, prometheus: &str, expr: &str) -> Option<Vec<Value>> {
    let mut url = url::Url::parse(&format!("{prometheus}/api/v1/query")).expect("url");
    url.query_pairs_mut().append_pair("query", expr);
    let body: Value = http.get(url).send().await.ok()?.json().await.ok()?;
    if body["status"] != "success" {
        panic!("Prometheus rejected {expr}: {body}");
    }
    body["data"]["result"].as_array().cloned()
}

#[test]
#[ignore = "needs prometheus (apt-get install prometheus; run by .ci/run)"]
fn every_dashboard_query_returns_data_from_the_local_stack() {
    assert!(
        prometheus_installed(),
        "no `prometheus` on the PATH (apt-get install prometheus)"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let logs = dir.path().join("logs");
    let (up, gateway) = common::start_stack(&logs);
    let _up = Killed(up);
    let targets = logs.join("prometheus-targets.json");
    assert!(
        targets.is_file(),
        "the stack lists its components for Prometheus"
    );

    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, prometheus_config(&targets)).expect("config written");
    let port = free_port();
    let prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    let base = format!("http://127.0.0.1:{port}");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dead = runtime.block_on(async {
        let http = reqwest::Client::new();
        // Every component scraped and up.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = series(&http, &base, "up == 1").await.unwrap_or_default();
            if up.len() == 6 {
                break;
            }
            assert!(Instant::now() < deadline, "targets up: {up:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // A short load: four users for eight seconds, bounded.
        let load_until = Instant::now() + Duration::from_secs(8);
        let users: Vec<_> = (0..4)
            .map(|user| {
                let (http, gateway) = (http.clone(), gateway.clone());
                tokio::spawn(async move {
                    let mut i = 0;
                    while Instant::now() < load_until && i < 10_000 {
                        let owner = format!("o{:05}", (user * 5 + i) % 20 + 1);
                        let url =
                            format!("{gateway}api/invoices?ownerId={owner}&year=2026&month=12");
                        let _ = http.get(url).send().await;
                        i += 1;
                    }
                })
            })
            .collect();
        // Scrapes during the load, so in-flight requests are seen.
        for user in users {
            let _ = user.await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut dead = Vec::new();
        for (panel, expr) in dashboard_queries() {
            // Grafana's $__rate_interval is at least four scrape intervals.
            let query = expr.replace("$__rate_interval", "15s");
            match series(&http, &base, &query).await {
                Some(result) if !result.is_empty() => {}
                other => dead.push(format!("{panel}: {expr} -> {other:?}")),
            }
        }
        dead
    });
    drop(prometheus);
    assert!(
        dead.is_empty(),
        "dashboard queries without data:\n{}",
        dead.join("\n")
    );
}

/// The Collector cannot run here; its configuration is at least whole: every pipeline
/// names receivers, processors and exporters that are defined, and traces go out over
/// OTLP while metrics reach a Prometheus exporter.
#[test]
fn the_collector_configuration_wires_every_pipeline() {
    let text = std::fs::read_to_string(repo_file("dashboards/otel-collector/config.yaml"))
        .expect("the Collector configuration");
    let config: Value = serde_saphyr::from_str(&text).expect("YAML");
    let pipelines = config["service"]["pipelines"]
        .as_object()
        .expect("pipelines");
    assert!(pipelines.contains_key("traces") && pipelines.contains_key("metrics"));
    for (name, pipeline) in pipelines {
        for section in ["receivers", "processors", "exporters"] {
            let used = pipeline[section].as_array().expect("a list");
            assert!(
                !used.is_empty() || section == "processors",
                "{name}.{section}"
            );
            for component in used {
                let component = component.as_str().expect("a name");
                assert!(
                    config[section].get(component).is_some(),
                    "{name} uses {section} `{component}`, which is not defined"
                );
            }
        }
    }
    let exporters = |pipeline: &str| pipelines[pipeline]["exporters"].to_string();
    assert!(exporters("traces").contains("otlp"));
    assert!(exporters("metrics").contains("prometheus"));
    assert!(pipelines["traces"]["receivers"]
        .to_string()
        .contains("otlp"));
}
