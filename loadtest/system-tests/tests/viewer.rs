//! The real services export over real OTLP — gateway and delivery over gRPC, package and
//! utilization over HTTP/protobuf — into the real trace viewer; the trace is then read
//! back through its Jaeger API and rendered by a headless browser.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use dronelab_contract::Container;
use serde_json::Value;
use service_kit::OtlpProtocol;
use system_tests::*;
use trace_analysis::jaeger::{Envelope, Trace};
use trace_analysis::summary::TraceSummary;

struct Viewer {
    ui: String,
    grpc: String,
    http: String,
    store: Arc<trace_viewer::Store>,
    _task: tokio::task::JoinHandle<()>,
}

async fn start_viewer() -> Viewer {
    let listeners = trace_viewer::Listeners::loopback().await.expect("bind");
    let urls = listeners.urls().expect("urls");
    let store = Arc::new(trace_viewer::Store::new(trace_viewer::Limits {
        max_spans: 100_000,
        max_bytes: 64 << 20,
    }));
    let served = store.clone();
    let task = tokio::spawn(async move {
        let _ = trace_viewer::run(listeners, served, std::future::pending()).await;
    });
    Viewer {
        ui: urls.ui,
        grpc: urls.otlp_grpc,
        http: urls.otlp_http,
        store,
        _task: task,
    }
}

async fn get_json(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("viewer answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json body"))
}

/// A trace with a 429, produced by the whole invoice path at 20 RU/s.
struct ThrottledRun {
    viewer: Viewer,
    trace_id: String,
}

async fn throttled_run() -> ThrottledRun {
    let viewer = start_viewer().await;
    let stack = TestStack::start(2).await;

    stack.set_throughput(Container::Utilization, 20).await;
    let otlp = |name: &'static str, protocol: OtlpProtocol| {
        let endpoint = match protocol {
            OtlpProtocol::Grpc => &viewer.grpc,
            OtlpProtocol::HttpProtobuf => &viewer.http,
        };
        Telemetry::otlp_to(name, protocol, endpoint).expect("exporter")
    };
    let telemetries = [
        otlp("delivery-service", OtlpProtocol::Grpc),
        otlp("package-service", OtlpProtocol::HttpProtobuf),
        otlp("utilization-service", OtlpProtocol::HttpProtobuf),
        otlp("gateway", OtlpProtocol::Grpc),
    ];
    let delivery = stack.delivery(telemetries[0].clone()).await;
    let package = stack.package(telemetries[1].clone()).await;
    let utilization = stack
        .utilization(telemetries[2].clone(), knobs("0", false))
        .await;
    let gateway = start_gateway(
        &gateway::GatewayArgs::with_backends(delivery.url(), package.url(), utilization.url()),
        telemetries[3].clone(),
    )
    .await;
    let url = format!("http://{}/api/invoices?{}", gateway.addr, owner_month(2, 2));
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let r = reqwest::get(url).await.expect("answered");
                assert_eq!(r.status().as_u16(), 200);
                r.headers()
                    .get("x-trace-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
                    .expect("x-trace-id")
            })
        })
        .collect();
    let mut trace_ids = Vec::new();
    for call in calls {
        trace_ids.push(call.await.expect("task"));
    }
    // Flush every exporter (blocking calls: off the async workers).
    tokio::task::spawn_blocking(move || telemetries.iter().for_each(Telemetry::shutdown))
        .await
        .expect("flushed");
    let (_, found) = get_json(&format!(
        "{}/api/traces?service=utilization-service&tags={}&limit=20",
        viewer.ui,
        percent(r#"{"db.response.status_code":"429"}"#)
    ))
    .await;
    let found: Envelope<Vec<Trace>> = serde_json::from_value(found).expect("Jaeger traces");
    assert!(
        !found.data.is_empty(),
        "a trace with a 429 attempt is found by tag"
    );
    for trace in &found.data {
        assert!(trace_ids.contains(&trace.trace_id), "one of ours");
        assert!(
            trace
                .spans
                .iter()
                .any(|s| s.tag_text("db.response.status_code").as_deref() == Some("429")),
            "every match has a 429 attempt"
        );
    }
    drop((gateway, utilization, package, delivery, stack));
    ThrottledRun {
        trace_id: found.data[0].trace_id.clone(),
        viewer,
    }
}

fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// What the tuning run tells the viewer about a stage, and the link it prints for it.
#[tokio::test]
async fn the_tuning_runs_client_announces_stages_and_links_their_page() {
    use trace_analysis::client::{TraceApi, TraceWindow};
    let viewer = start_viewer().await;
    let api = TraceApi::new(viewer.ui.parse().expect("the viewer's URL"));
    api.announce_stage("2-more-ru", 10, 20)
        .await
        .expect("announced");
    api.announce_stage("3-parallel", 30, 40)
        .await
        .expect("announced");
    let (_, stages) = get_json(&format!("{}/api/stages", viewer.ui)).await;
    assert_eq!(
        stages["data"],
        serde_json::json!([
            {"name": "2-more-ru", "start": 10, "end": 20},
            {"name": "3-parallel", "start": 30, "end": 40}
        ])
    );
    let refused = api.announce_stage("", 1, 2).await;
    assert!(refused.is_err(), "an empty name is refused: {refused:?}");
    let window = TraceWindow {
        service: "gateway".into(),
        operation: "GET /api/invoices".into(),
        start_us: Some(10),
        end_us: Some(20),
        lookback: None,
        limit: 1,
        load_per_second: Vec::new(),
    };
    let link = api
        .critical_path_link(&window)
        .expect("a window gives a link");
    assert_eq!(
        link,
        format!(
            "{}/stage?service=gateway&operation=GET+%2Fapi%2Finvoices&start=10&end=20",
            viewer.ui
        )
    );
    let (status, body) = get_json(&link.replace("/stage?", "/api/analysis/critical-path?")).await;
    assert_eq!(status, 200, "the link's parameters are the API's: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_otlp_export_over_grpc_and_http_reads_back_through_the_jaeger_api() {
    let run = throttled_run().await;
    let ui = &run.viewer.ui;

    let (status, services) = get_json(&format!("{ui}/api/services")).await;
    assert_eq!(status, 200);
    let services: BTreeSet<&str> = services["data"]
        .as_array()
        .expect("data array")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        services,
        BTreeSet::from([
            "delivery-service",
            "gateway",
            "package-service",
            "utilization-service"
        ]),
        "gRPC and HTTP exporters both arrived"
    );
    let (_, ops) = get_json(&format!("{ui}/api/services/gateway/operations")).await;
    assert!(ops["data"]
        .as_array()
        .expect("ops")
        .contains(&Value::from("GET /api/invoices")));

    let (status, raw) = get_json(&format!("{ui}/api/traces/{}", run.trace_id)).await;
    assert_eq!(status, 200);
    assert_eq!(
        raw["data"][0]["traceID"],
        Value::from(run.trace_id.as_str())
    );
    let first_span = &raw["data"][0]["spans"][0];
    for field in [
        "traceID",
        "spanID",
        "operationName",
        "references",
        "startTime",
        "duration",
        "tags",
        "processID",
    ] {
        assert!(first_span.get(field).is_some(), "Jaeger span field {field}");
    }
    let trace: Envelope<Vec<Trace>> = serde_json::from_value(raw).expect("Jaeger shape");
    let trace = &trace.data[0];
    let ids: HashSet<&str> = trace.spans.iter().map(|s| s.span_id.as_str()).collect();
    let root = trace.root().expect("root");
    assert_eq!(trace.service_of(root), "gateway");
    assert_eq!(root.operation_name, "GET /api/invoices");
    assert_eq!(root.tag_text("span.kind").as_deref(), Some("server"));
    assert_eq!(
        root.tag_text("http.response.status_code").as_deref(),
        Some("200")
    );
    for span in &trace.spans {
        if span.span_id != root.span_id {
            let parent = span.parent_id().expect("every other span has a parent");
            assert!(ids.contains(parent), "parent {parent} is in the trace");
        }
        assert!(span.start_time >= root.start_time, "µs timestamps line up");
        assert!(span.end_time() <= root.end_time() + 1_000);
    }
    let per_service: BTreeSet<&str> = trace.spans.iter().map(|s| trace.service_of(s)).collect();
    assert_eq!(per_service.len(), 4, "one trace through all four services");

    let (_, summary) = get_json(&format!("{ui}/api/traces/{}/summary", run.trace_id)).await;
    let summary: TraceSummary =
        serde_json::from_value(summary["data"].clone()).expect("summary shape");
    let attempts = trace
        .spans
        .iter()
        .filter(|s| trace_analysis::summary::is_cosmos_attempt(s))
        .count();
    assert_eq!(summary.cosmos_attempts, attempts);
    assert!(summary.cosmos_throttled >= 1);
    let utilization = summary.service("utilization-service").expect("utilization");
    assert_eq!(utilization.partition_ranges, 2, "both partitions queried");
    assert_eq!(
        utilization.max_concurrent_attempts, 1,
        "parallelism 0 drains partitions one at a time"
    );
    assert!(
        summary
            .retry_waits
            .iter()
            .any(|w| w.retry_span_id.is_some()),
        "the retry after the 429 is found"
    );
    assert!(utilization.retry_wait_us > 0);

    let (status, missing) = get_json(&format!("{ui}/api/traces/{}", "ab".repeat(16))).await;
    assert_eq!(status, 404);
    assert_eq!(missing["errors"][0]["code"], Value::from(404));
    let (status, bad) = get_json(&format!("{ui}/api/traces?limit=lots")).await;
    assert_eq!(status, 400);
    assert_eq!(bad["invalidParams"][0]["name"], Value::from("limit"));
    assert!(run.viewer.store.stats().spans >= trace.spans.len());
}

/// Debian's chromium (or `CHROMIUM`); `.ci/run` installs it.
fn chromium() -> String {
    let candidates = [
        std::env::var("CHROMIUM").ok(),
        Some("chromium".to_owned()),
        Some("chromium-browser".to_owned()),
        Some("google-chrome".to_owned()),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("no chromium on the PATH (apt-get install chromium)")
}

/// Headless chromium's common flags, with a fresh profile in `profile`.
fn browser_command(browser: &str, profile: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(browser);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1400,1000",
            "--virtual-time-budget=15000",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .kill_on_drop(true);
    command
}

async fn run_browser(mut command: tokio::process::Command) -> std::process::Output {
    let output = tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .expect("chromium finished in time")
        .expect("chromium ran");
    assert!(
        output.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The page's DOM after its scripts ran, from headless chromium; fails on a script
/// error (the page writes them on its body) or a console error line.
async fn rendered_dom(browser: &str, url: &str) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut command = browser_command(browser, profile.path());
    command.arg("--dump-dom").arg(url);
    let output = run_browser(command).await;
    let dom = String::from_utf8_lossy(&output.stdout).into_owned();
    let console = String::from_utf8_lossy(&output.stderr);
    assert!(
        dom.contains("data-ready=\"true\""),
        "{url}: the page's scripts did not finish: {}",
        dom.chars().take(2_000).collect::<String>()
    );
    assert!(
        !dom.contains("data-page-errors"),
        "{url}: script errors on the page: {dom}"
    );
    let errors: Vec<&str> = console
        .lines()
        .filter(|l| l.contains(":CONSOLE") && (l.contains("Uncaught") || l.contains("Error")))
        .collect();
    assert!(errors.is_empty(), "{url}: console errors: {errors:?}");
    dom
}

/// Where the screenshots go: `docs/screenshots` when `UPDATE_SCREENSHOTS` is set (then
/// commit them), else a temporary directory (taken and checked all the same).
fn screenshot_dir() -> (std::path::PathBuf, Option<tempfile::TempDir>) {
    if std::env::var_os("UPDATE_SCREENSHOTS").is_some() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
        std::fs::create_dir_all(&dir).expect("docs/screenshots");
        (dir, None)
    } else {
        let temp = tempfile::tempdir().expect("screenshot dir");
        (temp.path().to_owned(), Some(temp))
    }
}

async fn screenshot(browser: &str, url: &str, file: &std::path::Path) {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut command = browser_command(browser, profile.path());
    command
        .arg(format!("--screenshot={}", file.display()))
        .arg(url);
    run_browser(command).await;
    let png = std::fs::read(file).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{}: not a page's picture ({} bytes)",
        file.display(),
        png.len()
    );
}

const MS: u64 = 1_000_000;

/// A hand-built invoice in OTLP/JSON, `ago_ms` before now: gateway 0..100 ms →
/// utilization 5..95 → three Cosmos visits, one after another (A) or at once (B). A
/// also reads the delivery cache for 80 ms and calls nothing else; B reads it for 10 ms
/// and also calls package-service.
fn hand_built(trace: u64, parallel: bool, ago_ms: u64) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let at = now - ago_ms * MS;
    let span = |n: u64, parent: Option<u64>, name: &str, kind: u8, start: u64, end: u64| {
        let database = name.contains(' ') && !name.starts_with("GET");
        serde_json::json!({
            "attributes": if database {
                serde_json::json!([{"key": "db.system.name", "value": {"stringValue": "azure.cosmosdb"}}])
            } else {
                serde_json::json!([])
            },
            "traceId": format!("{trace:032x}"),
            "spanId": format!("{:016x}", trace * 100 + n),
            "parentSpanId": parent.map(|p| format!("{:016x}", trace * 100 + p)).unwrap_or_default(),
            "name": name, "kind": kind,
            "startTimeUnixNano": (at + start * MS).to_string(),
            "endTimeUnixNano": (at + end * MS).to_string(),
        })
    };
    let visit = |i: u64| {
        let (start, end) = if parallel {
            (10, 50)
        } else {
            (10 + 30 * i, 30 + 30 * i)
        };
        span(10 + i, Some(2), "query_items utilization", 3, start, end)
    };
    let resource = |service: &str, spans: Vec<Value>| {
        serde_json::json!({
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
            "scopeSpans": [{"spans": spans}],
        })
    };
    let mut gateway = vec![span(1, None, "GET /api/invoices", 2, 0, 100)];
    gateway.push(span(
        3,
        Some(1),
        "read_item delivery-cache",
        3,
        10,
        if parallel { 20 } else { 90 },
    ));
    let mut resources = vec![
        resource("gateway", gateway),
        resource(
            "utilization-service",
            vec![
                span(2, Some(1), "GET /api/utilization", 2, 5, 95),
                visit(0),
                visit(1),
                visit(2),
            ],
        ),
    ];
    if parallel {
        resources.push(resource(
            "package-service",
            vec![span(4, Some(1), "GET /api/packages", 2, 5, 30)],
        ));
    }
    serde_json::json!({ "resourceSpans": resources })
}

async fn post_json(url: &str, body: &Value) -> u16 {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("the viewer answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs chromium (apt-get install chromium; run by .ci/run)"]
async fn every_page_of_the_ui_works_in_a_real_browser() {
    let browser = chromium();
    let run = throttled_run().await;
    let ui = run.viewer.ui.clone();
    // Hand-built traces A (serial) and B (parallel), announced as two stages.
    let (a, b) = (0xa11ce_u64, 0xb0b_u64);
    for (trace, parallel, ago) in [(a, false, 600_000), (b, true, 540_000)] {
        let status = post_json(
            &format!("{}/v1/traces", run.viewer.http),
            &hand_built(trace, parallel, ago),
        )
        .await;
        assert_eq!(status, 200);
        let start_us = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64))
            - (ago + 500) * 1_000;
        let name = if parallel { "3-parallel" } else { "2-serial" };
        let window =
            serde_json::json!({"name": name, "start": start_us, "end": start_us + 1_000_000});
        assert_eq!(post_json(&format!("{ui}/api/stages"), &window).await, 200);
    }
    let (dir, _keep) = screenshot_dir();
    check_trace_page(&browser, &run, &dir).await;
    check_search_page(&browser, &run, &dir).await;
    check_compare_page(&browser, &ui, (a, b), &dir).await;
    check_stage_page(&browser, &ui, &dir).await;
    check_services_page(&browser, &ui, &dir).await;
}

async fn check_trace_page(browser: &str, run: &ThrottledRun, dir: &std::path::Path) {
    let ui = &run.viewer.ui;
    let (_, raw) = get_json(&format!("{ui}/api/traces/{}", run.trace_id)).await;
    let trace: Envelope<Vec<Trace>> = serde_json::from_value(raw).expect("trace");
    let trace = &trace.data[0];
    let (_, path) = get_json(&format!("{ui}/api/traces/{}/critical-path", run.trace_id)).await;
    let sections = path["data"]["criticalPath"].as_array().expect("a path");
    let url = format!("{ui}/trace/{}", run.trace_id);
    let dom = rendered_dom(browser, &url).await;
    let rows = dom.matches("class=\"span-row").count();
    assert_eq!(rows, trace.spans.len(), "one waterfall row per span");
    for span in &trace.spans {
        assert!(
            dom.contains(&format!("data-span-id=\"{}\"", span.span_id)),
            "span {} ({}) drawn",
            span.span_id,
            span.operation_name
        );
    }
    assert!(
        dom.contains("span-row error"),
        "the 429 attempt is drawn as an error"
    );
    assert!(
        dom.contains("retry wait"),
        "the wait after the 429 is drawn"
    );
    assert!(
        dom.contains("Cosmos calls"),
        "the per-trace summary is shown"
    );
    assert!(
        dom.contains("gateway: GET /api/invoices"),
        "titled by its root span"
    );
    assert!(
        dom.contains("id=\"trace-warnings\" class=\"error-text\" hidden"),
        "a whole trace shows no warning"
    );
    // The critical path: one mark per section, its spans' rows marked, the root first.
    assert_eq!(
        dom.matches("class=\"critical\"").count(),
        sections.len(),
        "one mark per section"
    );
    let on_path: BTreeSet<&str> = sections
        .iter()
        .filter_map(|s| s["spanID"].as_str())
        .collect();
    for id in &on_path {
        assert!(
            dom.contains(&format!(
                "on-critical-path\" role=\"row\" tabindex=\"0\" data-span-id=\"{id}\""
            )),
            "span {id} is marked on the path"
        );
    }
    let root = trace.root().expect("a root");
    assert!(
        on_path.contains(root.span_id.as_str()),
        "the root is on its own path"
    );
    let statistics = path["data"]["statistics"].as_array().map_or(0, Vec::len);
    assert_eq!(
        dom.matches("class=\"stats-row\"").count(),
        statistics,
        "one statistics row per operation"
    );
    assert_eq!(
        dom.matches("span-table-row").count(),
        trace.spans.len(),
        "one span table row per span"
    );
    screenshot(browser, &url, &dir.join("trace.png")).await;
}

async fn check_search_page(browser: &str, run: &ThrottledRun, dir: &std::path::Path) {
    let url = format!("{}/search?service=gateway&sort=longest", run.viewer.ui);
    let search = rendered_dom(browser, &url).await;
    assert!(
        search.contains(&format!("data-trace-id=\"{}\"", run.trace_id)),
        "the search lists the trace"
    );
    assert!(
        search.contains("id=\"service\"><option value=\"")
            && !search.contains("id=\"service\"><option value=\"\">"),
        "no search of every service: the service list starts with a service"
    );
    let results = search.matches("class=\"result-row\"").count();
    assert_eq!(
        search.matches("<circle").count(),
        results,
        "one dot per result"
    );
    assert!(
        results >= 3,
        "the run's traces and the two hand-built ones: {results}"
    );
    // Longest first: the listed durations do not rise.
    let (_, found) = get_json(&format!(
        "{}/api/traces?service=gateway&limit=20&lookback=1h",
        run.viewer.ui
    ))
    .await;
    let found: Envelope<Vec<Trace>> = serde_json::from_value(found).expect("traces");
    let mut longest: Vec<(u64, &str)> = found
        .data
        .iter()
        .map(|t| {
            let start = t.spans.iter().map(|s| s.start_time).min().unwrap_or(0);
            let end = t.spans.iter().map(|s| s.end_time()).max().unwrap_or(0);
            (end - start, t.trace_id.as_str())
        })
        .collect();
    longest.sort_by_key(|x| std::cmp::Reverse(x.0));
    let first = search
        .split("class=\"result-row\" data-trace-id=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a first row");
    assert_eq!(first, longest[0].1, "the longest trace comes first");
    // The stage filter offers the announced stages and narrows the search to one.
    assert!(
        search.contains("<option value=\"2-serial\">"),
        "the stages are offered"
    );
    let staged = rendered_dom(
        browser,
        &format!("{}/search?service=gateway&stage=2-serial", run.viewer.ui),
    )
    .await;
    assert_eq!(
        staged.matches("class=\"result-row\"").count(),
        1,
        "only stage 2-serial's trace"
    );
    assert!(staged.contains(&format!("data-trace-id=\"{:032x}\"", 0xa11ce)));
    screenshot(browser, &url, &dir.join("search.png")).await;
}

async fn check_compare_page(browser: &str, ui: &str, (a, b): (u64, u64), dir: &std::path::Path) {
    let url = format!("{ui}/compare?a={a:x}&b={b:x}");
    let dom = rendered_dom(browser, &url).await;
    // By hand: packages only in B; the visits 60 → 120 ms in all; the cache read 80 → 10.
    for (operation, verdict) in [
        ("GET /api/packages", "added"),
        ("query_items utilization", "longer"),
        ("read_item delivery-cache", "shorter"),
        ("GET /api/invoices", "same"),
        ("GET /api/utilization", "same"),
    ] {
        let row = dom
            .split("<tr class=\"compare-row ")
            .find(|r| r.contains(&format!("<td>{operation}</td>")))
            .unwrap_or_else(|| panic!("no compare row for {operation}"));
        assert!(
            row.starts_with(verdict),
            "{operation}: {}",
            &row[..row.len().min(300)]
        );
    }
    let (_, back) = get_json(&format!("{ui}/api/analysis/compare?a={b:x}&b={a:x}")).await;
    let missing = back["data"]["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["operation"] == "GET /api/packages"))
        .map(|r| r["verdict"].clone());
    assert_eq!(missing, Some(Value::from("missing")));
    assert!(dom.contains("<td>3</td>"), "the visits' counts are shown");
    screenshot(browser, &url, &dir.join("compare.png")).await;
}

async fn check_stage_page(browser: &str, ui: &str, dir: &std::path::Path) {
    let (_, stages) = get_json(&format!("{ui}/api/stages")).await;
    let window = |name: &str| {
        stages["data"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name))
            .map(|s| (s["start"].clone(), s["end"].clone()))
            .expect("announced")
    };
    let ((a0, a1), (b0, b1)) = (window("2-serial"), window("3-parallel"));
    let url = format!(
        "{ui}/stage?service=gateway&operation=GET%20/api/invoices&start={a0}&end={a1}&compareStart={b0}&compareEnd={b1}"
    );
    let dom = rendered_dom(browser, &url).await;
    assert!(
        dom.contains("class=\"stage-row\""),
        "the breakdown is drawn"
    );
    // Serial: 60 of 100 ms in the visits; at once: 40 of 100.
    assert!(
        dom.contains("60.0 %") && dom.contains("40.0 %"),
        "the database shares of A and B"
    );
    assert!(dom.contains("-20.0 pts"), "the change of the visits' share");
    assert!(
        dom.contains("<td>3.0</td>") && dom.contains("<td>1.0</td>"),
        "three visits on each serial path, one on each parallel one"
    );
    screenshot(browser, &url, &dir.join("stage.png")).await;
    // Stage A alone (the report's link) is set beside the next announced stage.
    let alone = rendered_dom(
        browser,
        &format!("{ui}/stage?service=gateway&operation=GET%20/api/invoices&start={a0}&end={a1}"),
    )
    .await;
    assert!(alone.contains("-20.0 pts"), "compared with the next stage");
}

async fn check_services_page(browser: &str, ui: &str, dir: &std::path::Path) {
    let url = format!("{ui}/services");
    let dom = rendered_dom(browser, &url).await;
    for service in [
        "gateway",
        "utilization-service",
        "package-service",
        "delivery-service",
    ] {
        assert!(
            dom.contains(&format!("data-service=\"{service}\"")),
            "{service} in the graph"
        );
    }
    assert!(
        dom.contains("data-parent=\"gateway\" data-child=\"utilization-service\""),
        "the gateway → utilization edge"
    );
    assert!(
        dom.contains("class=\"operation-row"),
        "the operations table"
    );
    screenshot(browser, &url, &dir.join("services.png")).await;
}

/// The emulator's counters for utilization-service's container: calls answered (2xx and
/// 429) and 429s by partition.
async fn utilization_counters(
    emulator: &url::Url,
) -> (u64, std::collections::BTreeMap<String, u64>) {
    let stats: cosmos_emulator::Stats = reqwest::get(format!("{emulator}_emulator/stats"))
        .await
        .expect("stats answered")
        .json()
        .await
        .expect("stats JSON");
    let container = stats
        .databases
        .iter()
        .flat_map(|d| d.containers.iter())
        .find(|c| c.id == Container::Utilization.name())
        .expect("the utilization container");
    let ok: u64 = container
        .partitions
        .iter()
        .flat_map(|p| p.counters.requests_by_status.iter())
        .filter(|(status, _)| status.starts_with('2'))
        .map(|(_, n)| n)
        .sum();
    let throttled = container
        .partitions
        .iter()
        .map(|p| (p.id.clone(), p.counters.throttled_requests))
        .collect();
    (ok + container.throttled_requests, throttled)
}

/// utilization-service exports no spans (as a service outside the tracing setup, or
/// sampled away, would not): its throttled Cosmos calls are missing from every trace.
/// The emulator's counters still show them, so the diagnosis names throttling from the
/// counters and says that the traces disagree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn throttling_hidden_from_the_traces_is_named_from_the_counters() {
    use trace_analysis::diagnosis::{diagnose_with_half, entry_traces, FindingKind, StageCounters};

    let viewer = start_viewer().await;
    let stack = TestStack::start(2).await;
    stack.set_throughput(Container::Utilization, 20).await;
    let exported = |name: &'static str| {
        Telemetry::otlp_to(name, OtlpProtocol::Grpc, &viewer.grpc).expect("exporter")
    };
    let telemetries = [
        exported("delivery-service"),
        exported("package-service"),
        exported("gateway"),
    ];
    let delivery = stack.delivery(telemetries[0].clone()).await;
    let package = stack.package(telemetries[1].clone()).await;
    let utilization = stack
        .utilization(Telemetry::disabled(), knobs("0", false))
        .await;
    let gateway = start_gateway(
        &gateway::GatewayArgs::with_backends(delivery.url(), package.url(), utilization.url()),
        telemetries[2].clone(),
    )
    .await;
    let (calls_before, throttled_before) = utilization_counters(&stack.emulator.url()).await;

    const REQUESTS: usize = 12;
    let calls: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let url = format!(
                "http://{}/api/invoices?{}",
                gateway.addr,
                owner_month(i % 3, i % 2)
            );
            tokio::spawn(async move {
                let r = reqwest::get(url).await.expect("answered");
                let status = r.status().as_u16();
                let body: Value = r.json().await.expect("invoice JSON");
                status != 200 || body["partial"] == Value::Bool(true)
            })
        })
        .collect();
    let mut failed = 0;
    for call in calls {
        failed += u64::from(call.await.expect("task"));
    }
    tokio::task::spawn_blocking(move || telemetries.iter().for_each(Telemetry::shutdown))
        .await
        .expect("flushed");
    let (calls_after, throttled_after) = utilization_counters(&stack.emulator.url()).await;
    let counters = StageCounters {
        seconds: 10.0,
        cosmos_calls: calls_after - calls_before,
        throttled_by_range: throttled_after
            .into_iter()
            .map(|(range, n)| {
                let before = throttled_before.get(&range).copied().unwrap_or(0);
                (range, n - before)
            })
            .collect(),
        requests: REQUESTS as u64,
        steady_requests: REQUESTS as u64,
        steady_failed: failed,
        ..StageCounters::default()
    };
    let counted = counters.throttled_share().expect("calls counted");
    assert!(
        counted >= 0.05,
        "20 RU/s throttles the container: {counted}"
    );

    let (_, found) = get_json(&format!(
        "{}/api/traces?service=gateway&operation={}&limit=100",
        viewer.ui,
        percent("GET /api/invoices")
    ))
    .await;
    let found: Envelope<Vec<Trace>> = serde_json::from_value(found).expect("Jaeger traces");
    let entry = entry_traces(&found.data, "gateway", "GET /api/invoices");
    assert_eq!(entry.len(), REQUESTS, "every request traced at the gateway");
    let mut diagnosis = diagnose_with_half(&entry, "gateway");
    assert_eq!(
        diagnosis.cosmos.throttled_share, 0.0,
        "no throttled attempt in the traces"
    );
    assert!(
        !diagnosis.kinds().contains(&FindingKind::Throttling),
        "the traces alone miss it: {:?}",
        diagnosis.kinds()
    );

    diagnosis.weigh_counters(counters);
    let kinds = diagnosis.kinds();
    assert!(kinds.contains(&FindingKind::Throttling), "{kinds:?}");
    assert!(
        !kinds.contains(&FindingKind::NoCosmosBottleneck),
        "{kinds:?}"
    );
    let throttled = diagnosis
        .consistency
        .iter()
        .find(|c| c.figure == "throttled share of Cosmos calls")
        .expect("the throttled share compared");
    assert_eq!(throttled.sample, 0.0);
    assert!(!throttled.agree, "{throttled:?}");
    assert!(
        diagnosis.caveats().iter().any(
            |c| c.starts_with("the traces disagree with the stage's counters: throttled share")
        ),
        "{:?}",
        diagnosis.caveats()
    );
    drop((gateway, utilization, package, delivery, stack));
}
