//! The viewer's analysis endpoints over real OTLP/HTTP and real HTTP queries, on
//! hand-built traces whose answers were worked out by hand: the study's stage 2 (nine
//! partition visits one after another) and stage 3 (the same nine at once).

mod common;

use common::{post, resource, start, text};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, Span, Status};
use prost::Message as _;
use serde_json::Value;
use trace_viewer::Limits;

/// Stage 2's traces start here (ns), stage 3's one minute later.
const SERIAL_AT: u64 = 1_800_000_000_000_000_000;
const PARALLEL_AT: u64 = SERIAL_AT + 60_000_000_000;
const MS: u64 = 1_000_000;

fn span(
    trace: u64,
    n: u64,
    parent: Option<u64>,
    name: &str,
    start_ms: u64,
    end_ms: u64,
    at: u64,
) -> Span {
    let id = |n: u64| (trace * 100 + n).to_be_bytes().to_vec();
    Span {
        trace_id: u128::from(trace).to_be_bytes().to_vec(),
        span_id: id(n),
        parent_span_id: parent.map(id).unwrap_or_default(),
        name: name.into(),
        kind: if name.starts_with("query_items") {
            3
        } else {
            2
        },
        start_time_unix_nano: at + start_ms * MS,
        end_time_unix_nano: at + end_ms * MS,
        attributes: if name.starts_with("query_items") {
            vec![text("db.system.name", "azure.cosmosdb")]
        } else {
            Vec::new()
        },
        ..Default::default()
    }
}

/// One invoice: gateway 0..100 ms → utilization 5..95 and packages 5..20 (failed);
/// utilization's nine Cosmos visits take 8 ms each, one after another from 10 ms
/// (serial), or all from 10 ms, the i-th ending at 20 + i ms (parallel).
fn invoice(trace: u64, serial: bool, at: u64) -> Vec<ResourceSpans> {
    let mut utilization = vec![span(trace, 2, Some(1), "GET /api/utilization", 5, 95, at)];
    for i in 0..9 {
        let (start, end) = if serial {
            (10 + i * 9, 18 + i * 9)
        } else {
            (10, 20 + i)
        };
        utilization.push(span(
            trace,
            10 + i,
            Some(2),
            "query_items utilization",
            start,
            end,
            at,
        ));
    }
    let mut packages = span(trace, 3, Some(1), "GET /api/packages", 5, 20, at);
    packages.status = Some(Status {
        code: status::StatusCode::Error as i32,
        ..Default::default()
    });
    vec![
        resource(
            "gateway",
            vec![span(trace, 1, None, "GET /api/invoices", 0, 100, at)],
        ),
        resource("utilization-service", utilization),
        resource("package-service", vec![packages]),
    ]
}

async fn seeded() -> common::Viewer {
    let viewer = start(Limits {
        max_spans: 100_000,
        max_bytes: usize::MAX,
    })
    .await;
    let mut resource_spans = Vec::new();
    for t in 0..4 {
        resource_spans.extend(invoice(1 + t, true, SERIAL_AT + t * 1_000 * MS));
        resource_spans.extend(invoice(11 + t, false, PARALLEL_AT + t * 1_000 * MS));
    }
    let sent = post(
        &format!("{}/v1/traces", viewer.http),
        "application/x-protobuf",
        ExportTraceServiceRequest { resource_spans }.encode_to_vec(),
    )
    .await;
    assert_eq!(sent.status().as_u16(), 200);
    viewer
}

async fn get(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("the viewer answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

fn us(ns: u64) -> u64 {
    ns / 1_000
}

fn row<'a>(rows: &'a Value, service: &str, operation: &str) -> &'a Value {
    rows.as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["service"] == service && r["operation"] == operation)
        })
        .unwrap_or_else(|| panic!("no {service} {operation} in {rows}"))
}

#[tokio::test]
async fn dependencies_answer_in_jaegers_shape_with_counts_and_errors() {
    let viewer = seeded().await;
    let end_ms = (PARALLEL_AT + 10_000 * MS) / MS;
    let (status, body) = get(&format!(
        "{}/api/dependencies?endTs={end_ms}&lookback={}",
        viewer.ui,
        2 * 60 * 1_000
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let edges = body["data"].as_array().expect("data is a list");
    assert_eq!(edges.len(), 2, "{body}");
    let edge = |child: &str| {
        edges
            .iter()
            .find(|e| e["parent"] == "gateway" && e["child"] == child)
            .unwrap_or_else(|| panic!("gateway → {child} in {body}"))
    };
    // Eight invoices; the Cosmos calls stay inside utilization-service (no edge).
    assert_eq!(edge("utilization-service")["callCount"], 8);
    assert_eq!(edge("utilization-service")["errorCount"], 0);
    assert_eq!(edge("package-service")["callCount"], 8);
    assert_eq!(edge("package-service")["errorCount"], 8);
    // A window before the traces has none; bad parameters name themselves.
    let (_, empty) = get(&format!(
        "{}/api/dependencies?endTs=1000&lookback=10",
        viewer.ui
    ))
    .await;
    assert_eq!(empty["data"], Value::Array(Vec::new()));
    for (query, field) in [("endTs=soon", "endTs"), ("lookback=-1", "lookback")] {
        let (status, body) = get(&format!("{}/api/dependencies?{query}", viewer.ui)).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["invalidParams"][0]["name"], field, "{body}");
    }
}

#[tokio::test]
async fn the_stage_view_puts_serial_visits_on_the_path_and_parallel_ones_mostly_off() {
    let viewer = seeded().await;
    let url = format!(
        "{}/api/analysis/critical-path?service=gateway&operation=GET%20/api/invoices&start={}&end={}&compareStart={}&compareEnd={}",
        viewer.ui,
        us(SERIAL_AT),
        us(SERIAL_AT + 10_000 * MS),
        us(PARALLEL_AT),
        us(PARALLEL_AT + 10_000 * MS),
    );
    let (status, body) = get(&url).await;
    assert_eq!(status, 200, "{body}");
    let (a, b) = (&body["data"]["window"], &body["data"]["compare"]);
    assert_eq!(
        (&a["requests"], &b["requests"]),
        (&Value::from(4), &Value::from(4))
    );
    let cosmos = "query_items utilization";
    let serial = row(&a["operations"], "utilization-service", cosmos);
    let parallel = row(&b["operations"], "utilization-service", cosmos);
    // By hand: serial, nine visits of 8 ms of each 100 ms request; parallel, only the
    // last visit (10..28 ms).
    assert_eq!(serial["criticalPathUs"], 4 * 72_000);
    assert_eq!(serial["sections"], 4 * 9);
    assert_eq!(parallel["criticalPathUs"], 4 * 18_000);
    assert_eq!(parallel["sections"], 4);
    assert!(
        (a["databaseShare"].as_f64().unwrap_or(0.0) - 0.72).abs() < 1e-9,
        "{a}"
    );
    assert!(
        (b["databaseShare"].as_f64().unwrap_or(0.0) - 0.18).abs() < 1e-9,
        "{b}"
    );
    assert_eq!(serial["perRequestUs"]["p50"], 72_000);
    let shares: f64 = a["operations"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["share"].as_f64()).sum())
        .unwrap_or(0.0);
    assert!((shares - 1.0).abs() < 1e-9, "{shares}");
    // A window alone has no comparison.
    let (_, alone) = get(&format!(
        "{}/api/analysis/critical-path?service=gateway&start={}&end={}",
        viewer.ui,
        us(SERIAL_AT),
        us(SERIAL_AT + 10_000 * MS)
    ))
    .await;
    assert_eq!(alone["data"]["compare"], Value::Null);
    assert_eq!(alone["data"]["window"]["truncated"], false);
    for (query, field) in [
        ("start=1", "service"),
        ("service=gateway&start=20&end=10", "start"),
        ("service=gateway&compareEnd=10", "compareStart"),
        ("service=gateway&start=x", "start"),
    ] {
        let (status, body) =
            get(&format!("{}/api/analysis/critical-path?{query}", viewer.ui)).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["invalidParams"][0]["name"], field, "{query}: {body}");
    }
}

#[tokio::test]
async fn a_traces_critical_path_and_statistics_are_the_hand_computed_ones() {
    let viewer = seeded().await;
    let (status, body) = get(&format!(
        "{}/api/traces/{:032x}/critical-path",
        viewer.ui, 1
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let path: Vec<(String, u64, u64)> = body["data"]["criticalPath"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| {
            (
                s["spanID"].as_str().unwrap_or_default().to_owned(),
                s["start"].as_u64().unwrap_or(0) - us(SERIAL_AT),
                s["end"].as_u64().unwrap_or(0) - us(SERIAL_AT),
            )
        })
        .collect();
    let id = |n: u64| format!("{:016x}", 100 + n);
    // gateway 0..5, utilization 5..10, then each visit and the gap after it, the last
    // visit ending at 90, utilization 90..95, gateway 95..100.
    let mut expected = vec![(id(1), 0, 5_000), (id(2), 5_000, 10_000)];
    for i in 0..9 {
        let start = 10_000 + i * 9_000;
        expected.push((id(10 + i), start, start + 8_000));
        if i < 8 {
            expected.push((id(2), start + 8_000, start + 9_000));
        }
    }
    expected.push((id(2), 90_000, 95_000));
    expected.push((id(1), 95_000, 100_000));
    assert_eq!(path, expected);
    let stats = &body["data"]["statistics"];
    let visits = row(stats, "utilization-service", "query_items utilization");
    assert_eq!(
        (&visits["count"], &visits["totalUs"]),
        (&Value::from(9), &Value::from(72_000))
    );
    assert_eq!(visits["wallUs"], 72_000);
    // gateway: 100 less the union of 5..95 and 5..20.
    assert_eq!(row(stats, "gateway", "GET /api/invoices")["selfUs"], 10_000);
    let (status, _) = get(&format!(
        "{}/api/traces/{:032x}/critical-path",
        viewer.ui, 999
    ))
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn comparing_two_traces_marks_what_changed() {
    let viewer = seeded().await;
    let (status, body) = get(&format!(
        "{}/api/analysis/compare?a={:x}&b={:x}",
        viewer.ui, 1, 11
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let rows = &body["data"]["rows"];
    let visits = row(rows, "utilization-service", "query_items utilization");
    // Nine visits in both; 72 ms of them one after another, 36+… ms all at once.
    assert_eq!(
        (&visits["a"]["count"], &visits["b"]["count"]),
        (&Value::from(9), &Value::from(9))
    );
    assert_eq!(visits["a"]["wallUs"], 72_000);
    assert_eq!(visits["b"]["wallUs"], 18_000);
    assert_eq!(visits["b"]["totalUs"], 9 * 10_000 + 36_000);
    // 72 → 126 ms in all: longer, though the request is no slower.
    assert_eq!(visits["verdict"], "longer");
    assert_eq!(row(rows, "gateway", "GET /api/invoices")["verdict"], "same");
    for (query, field) in [("a=1", "b"), ("a=zz&b=1", "a")] {
        let (status, body) = get(&format!("{}/api/analysis/compare?{query}", viewer.ui)).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["invalidParams"][0]["name"], field, "{body}");
    }
}

#[tokio::test]
async fn operations_have_rate_errors_and_percentiles() {
    let viewer = seeded().await;
    let (status, body) = get(&format!(
        "{}/api/analysis/operations?start={}&end={}",
        viewer.ui,
        us(SERIAL_AT),
        us(SERIAL_AT + 8_000 * MS)
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let rows = &body["data"];
    // Server spans only by default: the Cosmos client spans are not listed.
    assert_eq!(rows.as_array().map(Vec::len), Some(3), "{body}");
    let packages = row(rows, "package-service", "GET /api/packages");
    assert_eq!(packages["count"], 4);
    assert_eq!(packages["errorShare"], 1.0);
    assert_eq!(packages["perSecond"], 0.5);
    assert_eq!(
        row(rows, "gateway", "GET /api/invoices")["durationUs"]["p99"],
        100_000
    );
    let (_, client) = get(&format!(
        "{}/api/analysis/operations?service=utilization-service&spanKind=client&start={}&end={}",
        viewer.ui,
        us(SERIAL_AT),
        us(SERIAL_AT + 8_000 * MS)
    ))
    .await;
    let visits = row(
        &client["data"],
        "utilization-service",
        "query_items utilization",
    );
    assert_eq!(visits["count"], 36);
    assert_eq!(visits["durationUs"]["p50"], 8_000);
    let (status, body) = get(&format!(
        "{}/api/analysis/operations?spanKind=sideways",
        viewer.ui
    ))
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["invalidParams"][0]["name"], "spanKind");
}

#[tokio::test]
async fn stages_are_announced_listed_and_replaced_by_name() {
    let viewer = seeded().await;
    let client = reqwest::Client::new();
    let announce = |body: Value| {
        client
            .post(format!("{}/api/stages", viewer.ui))
            .json(&body)
            .send()
    };
    let ok = announce(serde_json::json!({"name": "2-parallel", "start": 10, "end": 20}))
        .await
        .expect("answers");
    assert_eq!(ok.status().as_u16(), 200);
    announce(serde_json::json!({"name": "3-key", "start": 30, "end": 40}))
        .await
        .expect("answers");
    announce(serde_json::json!({"name": "2-parallel", "start": 50, "end": 60}))
        .await
        .expect("answers");
    let (_, listed) = get(&format!("{}/api/stages", viewer.ui)).await;
    assert_eq!(
        listed["data"],
        serde_json::json!([
            {"name": "3-key", "start": 30, "end": 40},
            {"name": "2-parallel", "start": 50, "end": 60}
        ])
    );
    for (body, field) in [
        (
            serde_json::json!({"name": "x", "start": 9, "end": 1}),
            "start",
        ),
        (
            serde_json::json!({"name": " ", "start": 1, "end": 2}),
            "name",
        ),
        (serde_json::json!({"start": 1}), "body"),
    ] {
        let refused = announce(body.clone()).await.expect("answers");
        assert_eq!(refused.status().as_u16(), 400, "{body}");
        let problem: Value = refused.json().await.expect("problem+json");
        assert_eq!(
            problem["invalidParams"][0]["name"], field,
            "{body}: {problem}"
        );
    }
    let (_, after) = get(&format!("{}/api/stages", viewer.ui)).await;
    assert_eq!(after["data"].as_array().map(Vec::len), Some(2));
}
