//! The query API against Jaeger's query service, endpoint by endpoint, over real HTTP:
//! each row is a request and the status and body Jaeger's query service gives for it,
//! with the rule it follows (`cmd/query/app/query_parser.go`, `http_handler.go`).
//! `/api/dependencies` is not served yet (the dashboard issue builds it).

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{post, resource, start, text};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::Value;
use trace_viewer::Limits;

/// Trace ids of the seeded traces (1, 2, 3) in the short form Jaeger also accepts.
const TRACES: [u128; 3] = [0x1a, 0x2b, 0x3c];

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A span of `trace` (numbered `n` in it), a second ago, lasting `ms`.
fn span(trace: u128, n: u64, parent: Option<u64>, name: &str, kind: i32, ms: u64) -> Span {
    let start = now_ns() - 1_000_000_000;
    Span {
        trace_id: trace.to_be_bytes().to_vec(),
        span_id: (u64::try_from(trace).unwrap_or(0) * 100 + n)
            .to_be_bytes()
            .to_vec(),
        parent_span_id: parent
            .map(|p| {
                (u64::try_from(trace).unwrap_or(0) * 100 + p)
                    .to_be_bytes()
                    .to_vec()
            })
            .unwrap_or_default(),
        name: name.into(),
        kind,
        start_time_unix_nano: start,
        end_time_unix_nano: start + ms * 1_000_000,
        attributes: vec![text("http.route", "/api/invoices")],
        ..Default::default()
    }
}

/// Three traces: the gateway's server span (10, 20, 30 ms) over a client call, and
/// utilization-service's server, internal and unspecified-kind spans.
fn seed() -> ExportTraceServiceRequest {
    let (mut gateway, mut utilization) = (Vec::new(), Vec::new());
    for (i, trace) in TRACES.into_iter().enumerate() {
        let ms = 10 * (i as u64 + 1);
        gateway.push(span(trace, 1, None, "GET /api/invoices", 2, ms));
        gateway.push(span(trace, 2, Some(1), "GET utilization", 3, ms / 2));
        utilization.push(span(trace, 3, Some(2), "GET /api/utilization", 2, ms / 3));
        utilization.push(span(trace, 4, Some(3), "query", 1, 1));
        utilization.push(span(trace, 5, Some(3), "misc", 0, 1));
    }
    ExportTraceServiceRequest {
        resource_spans: vec![
            resource("gateway", gateway),
            resource("utilization-service", utilization),
        ],
    }
}

async fn get(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("the viewer answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// The ids of an answer's traces, sorted.
fn trace_ids(body: &Value) -> Vec<String> {
    let mut ids: Vec<String> = body["data"]
        .as_array()
        .map(|traces| {
            traces
                .iter()
                .filter_map(|t| t["traceID"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

fn hex(trace: u128) -> String {
    format!("{trace:032x}")
}

/// Jaeger's error body: no data, zeros, and the error with its code and message.
fn assert_jaeger_error(body: &Value, code: u16, msg: &str, row: &str) {
    assert_eq!(body["data"], Value::Null, "{row}: {body}");
    assert_eq!(
        (&body["total"], &body["limit"], &body["offset"]),
        (&Value::from(0), &Value::from(0), &Value::from(0)),
        "{row}: {body}"
    );
    assert_eq!(body["errors"][0]["code"], code, "{row}: {body}");
    let got = body["errors"][0]["msg"].as_str().unwrap_or_default();
    assert!(got.contains(msg), "{row}: {got:?} lacks {msg:?}");
}

#[tokio::test]
async fn the_query_api_answers_as_jaegers_query_service() {
    let viewer = start(Limits {
        max_spans: 10_000,
        max_bytes: usize::MAX,
    })
    .await;
    let sent = post(
        &format!("{}/v1/traces", viewer.http),
        "application/x-protobuf",
        seed().encode_to_vec(),
    )
    .await;
    assert_eq!(sent.status().as_u16(), 200);
    let ui = &viewer.ui;
    let (a, b, c) = (hex(TRACES[0]), hex(TRACES[1]), hex(TRACES[2]));
    let missing = hex(0xdead);

    // /api/services: every service that sent a span, sorted.
    let (status, body) = get(&format!("{ui}/api/services")).await;
    assert_eq!(
        (status, &body["data"]),
        (200, &serde_json::json!(["gateway", "utilization-service"]))
    );

    // /api/services/{service}/operations: names; an unknown service has none (200, not 404).
    for (service, expected) in [
        (
            "utilization-service",
            serde_json::json!(["GET /api/utilization", "misc", "query"]),
        ),
        ("no-such", serde_json::json!([])),
    ] {
        let (status, body) = get(&format!("{ui}/api/services/{service}/operations")).await;
        assert_eq!((status, &body["data"]), (200, &expected), "{service}");
    }

    // /api/operations?service&spanKind: names with kinds (unspecified: ""); the kind
    // filters; an unknown service has none; `service` is required.
    let rows: [(&str, u16, Value); 4] = [
        (
            "service=utilization-service",
            200,
            serde_json::json!([
                {"name": "GET /api/utilization", "spanKind": "server"},
                {"name": "misc", "spanKind": ""},
                {"name": "query", "spanKind": "internal"},
            ]),
        ),
        (
            "service=utilization-service&spanKind=internal",
            200,
            serde_json::json!([{"name": "query", "spanKind": "internal"}]),
        ),
        ("service=no-such", 200, serde_json::json!([])),
        ("spanKind=server", 400, Value::Null),
    ];
    for (query, status, data) in rows {
        let (got, body) = get(&format!("{ui}/api/operations?{query}")).await;
        assert_eq!((got, &body["data"]), (status, &data), "{query}: {body}");
    }

    // /api/traces/{id}: the full or the short form; unknown: 404; malformed: 400.
    let short = format!("{:x}", TRACES[0]);
    for (id, status) in [
        (a.as_str(), 200),
        (short.as_str(), 200),
        (missing.as_str(), 404),
        ("not-hex", 400),
    ] {
        let (got, body) = get(&format!("{ui}/api/traces/{id}")).await;
        assert_eq!(got, status, "{id}: {body}");
        if status == 200 {
            assert_eq!(trace_ids(&body), std::slice::from_ref(&a), "{id}");
        }
    }

    // /api/traces: a search needs `service` unless it asks by `traceID`; `traceID`
    // (repeatable) gives exactly those traces, a missing one as an error beside them;
    // `total` is 0 on a search; each malformed parameter is a 400.
    let search: [(String, u16, &str); 17] = [
        ("service=gateway".into(), 200, "all three"),
        ("service=gateway&limit=2".into(), 200, "limit"),
        ("limit=5".into(), 400, "parameter 'service' is required"),
        (format!("traceID={a}&traceID={c}"), 200, "exactly a and c"),
        (
            format!("traceID={a}&traceID={missing}"),
            200,
            "a, and an error for the missing",
        ),
        ("traceID=xyz".into(), 400, "cannot parse traceID param"),
        ("service=gateway&limit=0".into(), 400, "limit"),
        ("service=gateway&limit=many".into(), 400, "limit"),
        ("service=gateway&minDuration=1d".into(), 400, "minDuration"),
        (
            "service=gateway&minDuration=15ms&maxDuration=1ms".into(),
            400,
            "minDuration",
        ),
        (
            "service=gateway&minDuration=15ms".into(),
            200,
            "the 20 and 30 ms traces",
        ),
        (
            "service=gateway&maxDuration=9000µs".into(),
            200,
            "the trace with a 5 ms span",
        ),
        ("service=gateway&tag=novalue".into(), 400, "tag"),
        ("service=gateway&tags=%7Bnot".into(), 400, "tags"),
        ("service=gateway&tags=%7B%22k%22%3A1%7D".into(), 400, "tags"),
        (
            "service=utilization-service&tag=span.kind:internal".into(),
            200,
            "all three, by their internal span",
        ),
        ("service=gateway&start=later".into(), 400, "start"),
    ];
    for (query, status, rule) in &search {
        let (got, body) = get(&format!("{ui}/api/traces?{query}")).await;
        assert_eq!(got, *status, "{query} ({rule}): {body}");
        if *status == 400 {
            let msg = if rule.contains(' ') { *rule } else { "" };
            assert_jaeger_error(&body, 400, msg, query);
            continue;
        }
        assert_eq!(body["total"], 0, "{query}: a search's total is 0");
        let ids = trace_ids(&body);
        let expected: Vec<String> = match *rule {
            "all three" | "all three, by their internal span" => {
                vec![a.clone(), b.clone(), c.clone()]
            }
            "limit" => {
                assert_eq!(ids.len(), 2, "{query}");
                continue;
            }
            "exactly a and c" => vec![a.clone(), c.clone()],
            "a, and an error for the missing" => {
                assert_eq!(body["errors"][0]["traceID"], missing, "{body}");
                assert_eq!(body["errors"][0]["code"], 404, "{body}");
                vec![a.clone()]
            }
            "the 20 and 30 ms traces" => vec![b.clone(), c.clone()],
            "the trace with a 5 ms span" => vec![a.clone()],
            other => panic!("no expectation for {other}"),
        };
        assert_eq!(ids, expected, "{query} ({rule})");
    }

    // `end` bounds the traces' start: traces that started after it are not found.
    let before = (now_ns() - 3_000_000_000) / 1_000;
    let (_, body) = get(&format!("{ui}/api/traces?service=gateway&end={before}")).await;
    assert_eq!(trace_ids(&body), Vec::<String>::new(), "{body}");
}
