//! The Jaeger-compatible query API and the web UI.
//!
//! - `GET /api/services`, `GET /api/services/{service}/operations`,
//!   `GET /api/operations?service=&spanKind=`
//! - `GET /api/traces?service&operation&tags&tag&limit&lookback&start&end&minDuration&maxDuration`
//! - `GET /api/traces/{traceId}`
//! - ours: `GET /api/traces/{traceId}/summary` (Cosmos calls, RU, concurrency, retry
//!   waits), `GET /api/stats` (store counters)
//! - `GET /`, `GET /trace/{traceId}`: the UI (assets compiled into the binary).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use trace_analysis::jaeger::{self, ApiError, Envelope, Operation};
use trace_analysis::summary::{summarize, TraceSummary};

use crate::jaeger::from_stored;
use crate::store::{parse_trace_id, Store, StoreStats, TraceQuery};

/// Traces returned when `limit` is not given (Jaeger UI's default).
pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 10_000;

/// The one error type of the query API: Jaeger's `errors` envelope, served as RFC 9457
/// problem+json so both Jaeger clients and people get a readable answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiProblem {
    #[error("invalid query parameter {name:?}: {detail}")]
    InvalidParam { name: &'static str, detail: String },
    #[error("trace {0} not found")]
    TraceNotFound(String),
    #[error("service {0:?} not found")]
    ServiceNotFound(String),
}

impl IntoResponse for ApiProblem {
    fn into_response(self) -> Response {
        let (status, title, invalid) = match &self {
            ApiProblem::InvalidParam { name, detail } => (
                StatusCode::BAD_REQUEST,
                "Invalid query parameter",
                Some(serde_json::json!([{ "name": name, "reason": detail }])),
            ),
            ApiProblem::TraceNotFound(_) | ApiProblem::ServiceNotFound(_) => {
                (StatusCode::NOT_FOUND, "Not found", None)
            }
        };
        let mut body = serde_json::json!({
            "type": "about:blank",
            "title": title,
            "status": status.as_u16(),
            "detail": self.to_string(),
            "data": null,
            "total": 0,
            "limit": 0,
            "offset": 0,
            "errors": [ApiError { code: status.as_u16(), msg: self.to_string() }],
        });
        if let (Some(invalid), Some(map)) = (invalid, body.as_object_mut()) {
            map.insert("invalidParams".into(), invalid);
        }
        (
            status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response()
    }
}

pub fn router(store: Arc<Store>) -> Router {
    let metrics = lifecycle::metrics::MetricsRegistry::default();
    Router::new()
        .route("/api/services", get(services))
        .route(
            "/api/services/{service}/operations",
            get(service_operations),
        )
        .route("/api/operations", get(operations))
        .route("/api/traces", get(find_traces))
        .route("/api/traces/{trace_id}", get(get_trace))
        .route("/api/traces/{trace_id}/summary", get(trace_summary))
        .route("/api/stats", get(stats))
        // The viewer's own CPU and memory, so a dashboard shows what tracing costs.
        .route("/metrics", metrics.route())
        .route("/", get(index))
        .route("/search", get(index))
        .route("/trace/{trace_id}", get(index))
        .route("/assets/names.js", get(names_js))
        .route("/assets/app.js", get(app_js))
        .route("/assets/style.css", get(style_css))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(store)
}

async fn services(State(store): State<Arc<Store>>) -> Json<Envelope<Vec<String>>> {
    let services = store.services();
    let total = services.len();
    Json(Envelope::new(services, total))
}

async fn service_operations(
    State(store): State<Arc<Store>>,
    Path(service): Path<String>,
) -> Result<Json<Envelope<Vec<String>>>, ApiProblem> {
    let mut names: Vec<String> = store
        .operations(&service)
        .ok_or(ApiProblem::ServiceNotFound(service))?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.dedup();
    let total = names.len();
    Ok(Json(Envelope::new(names, total)))
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OperationsParams {
    service: Option<String>,
    span_kind: Option<String>,
}

async fn operations(
    State(store): State<Arc<Store>>,
    Query(params): Query<OperationsParams>,
) -> Result<Json<Envelope<Vec<Operation>>>, ApiProblem> {
    let service = params.service.ok_or(ApiProblem::InvalidParam {
        name: "service",
        detail: "required".into(),
    })?;
    let ops: Vec<Operation> = store
        .operations(&service)
        .ok_or(ApiProblem::ServiceNotFound(service))?
        .into_iter()
        .map(|(name, kind)| Operation {
            name,
            span_kind: kind.jaeger_name().unwrap_or("internal").to_owned(),
        })
        .filter(|op| {
            params
                .span_kind
                .as_deref()
                .is_none_or(|k| k.is_empty() || k == op.span_kind)
        })
        .collect();
    let total = ops.len();
    Ok(Json(Envelope::new(ops, total)))
}

async fn find_traces(
    State(store): State<Arc<Store>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Envelope<Vec<jaeger::Trace>>>, ApiProblem> {
    let query = parse_trace_query(&params, now_ns())?;
    let traces = store.find(&query, from_stored);
    let total = traces.len();
    Ok(Json(Envelope::new(traces, total)))
}

fn stored_trace(store: &Store, id: &str) -> Result<jaeger::Trace, ApiProblem> {
    let parsed = parse_trace_id(id).ok_or_else(|| ApiProblem::InvalidParam {
        name: "traceID",
        detail: "must be 1 to 32 hexadecimal digits".into(),
    })?;
    store
        .get(&parsed, from_stored)
        .ok_or_else(|| ApiProblem::TraceNotFound(id.to_owned()))
}

async fn get_trace(
    State(store): State<Arc<Store>>,
    Path(trace_id): Path<String>,
) -> Result<Json<Envelope<Vec<jaeger::Trace>>>, ApiProblem> {
    let trace = stored_trace(&store, &trace_id)?;
    Ok(Json(Envelope::new(vec![trace], 1)))
}

async fn trace_summary(
    State(store): State<Arc<Store>>,
    Path(trace_id): Path<String>,
) -> Result<Json<Envelope<TraceSummary>>, ApiProblem> {
    let trace = stored_trace(&store, &trace_id)?;
    Ok(Json(Envelope::new(summarize(&trace), 1)))
}

async fn stats(State(store): State<Arc<Store>>) -> Json<StoreStats> {
    Json(store.stats())
}

async fn index() -> Html<&'static str> {
    Html(include_str!("ui/index.html"))
}

async fn app_js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("ui/app.js"),
    )
}

/// The telemetry names the UI reads spans by, from dronelab-contract: one definition
/// for the services that write them and the page that reads them.
async fn names_js() -> impl IntoResponse {
    use dronelab_contract::telemetry::attribute;
    let names = serde_json::json!({
        "ERROR": attribute::ERROR,
        "DB_RESPONSE_STATUS_CODE": attribute::DB_RESPONSE_STATUS_CODE,
        "COSMOS_REQUEST_CHARGE": attribute::COSMOS_REQUEST_CHARGE,
        "COSMOS_PARTITION_KEY_RANGE_ID": attribute::COSMOS_PARTITION_KEY_RANGE_ID,
    });
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        format!("\"use strict\";\nconst NAMES = Object.freeze({names});\n"),
    )
}

async fn style_css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("ui/style.css"),
    )
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn invalid(name: &'static str, detail: impl Into<String>) -> ApiProblem {
    ApiProblem::InvalidParam {
        name,
        detail: detail.into(),
    }
}

/// Parses Jaeger's search parameters. `tags` is a JSON object of tag → value; `tag` may
/// repeat as `key:value`; `start`/`end` are µs since the epoch; `lookback` (e.g. `1h`,
/// `2d`, or `custom` to use `start`) is relative to `now_ns`.
pub fn parse_trace_query(
    params: &[(String, String)],
    now_ns: u64,
) -> Result<TraceQuery, ApiProblem> {
    let mut query = TraceQuery {
        limit: DEFAULT_LIMIT,
        ..Default::default()
    };
    let mut lookback = None;
    for (name, value) in params {
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        match name.as_str() {
            "service" => query.service = Some(value.to_owned()),
            "operation" => query.operation = Some(value.to_owned()),
            "limit" => {
                query.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|l| (1..=MAX_LIMIT).contains(l))
                    .ok_or_else(|| invalid("limit", format!("must be 1..={MAX_LIMIT}")))?
            }
            "tags" => {
                let object: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(value).map_err(|e| {
                        invalid(
                            "tags",
                            format!("must be a JSON object of tag to value: {e}"),
                        )
                    })?;
                query.tags.extend(object.into_iter().map(|(k, v)| {
                    let text = match v {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (k, text)
                }));
            }
            "tag" => {
                let (k, v) = value
                    .split_once(':')
                    .ok_or_else(|| invalid("tag", "must be key:value"))?;
                query.tags.push((k.to_owned(), v.to_owned()));
            }
            "start" => query.start_min_ns = Some(micros_param("start", value)? * 1_000),
            "end" => query.start_max_ns = Some(micros_param("end", value)? * 1_000),
            "minDuration" => {
                query.min_duration_ns =
                    Some(duration_ns(value).map_err(|e| invalid("minDuration", e))?)
            }
            "maxDuration" => {
                query.max_duration_ns =
                    Some(duration_ns(value).map_err(|e| invalid("maxDuration", e))?)
            }
            "lookback" if value != "custom" => {
                lookback = Some(duration_ns(value).map_err(|e| invalid("lookback", e))?)
            }
            _ => {}
        }
    }
    if let (Some(lookback), None) = (lookback, query.start_min_ns) {
        query.start_min_ns = Some(now_ns.saturating_sub(lookback));
    }
    if let (Some(min), Some(max)) = (query.min_duration_ns, query.max_duration_ns) {
        if min > max {
            return Err(invalid("minDuration", "is greater than maxDuration"));
        }
    }
    Ok(query)
}

fn micros_param(name: &'static str, value: &str) -> Result<u64, ApiProblem> {
    value
        .parse::<u64>()
        .ok()
        .filter(|v| *v <= u64::MAX / 1_000)
        .ok_or_else(|| invalid(name, "must be microseconds since the Unix epoch"))
}

/// Go-style durations as Jaeger takes them: `250ms`, `1.5s`, `1h30m`, `500us`, and `d`
/// for days (lookback).
pub fn duration_ns(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration like 100ms, 1.5s or 2h");
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "d" => 86_400e9,
            _ => return Err(bad()),
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(total as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(duration_ns("250ms"), Ok(250_000_000));
        assert_eq!(duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(duration_ns("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(duration_ns("500us"), Ok(500_000));
        assert_eq!(duration_ns("2d"), Ok(172_800_000_000_000));
        assert!(duration_ns("fast").is_err());
        assert!(duration_ns("10").is_err());
        assert!(duration_ns("").is_err());
    }

    #[test]
    fn search_parameters_parse() {
        let q = parse_trace_query(
            &params(&[
                ("service", "utilization-service"),
                (
                    "tags",
                    r#"{"db.response.status_code":"429","azure.cosmosdb.attempt":1}"#,
                ),
                ("tag", "error:true"),
                ("limit", "5"),
                ("lookback", "1h"),
                ("minDuration", "10ms"),
            ]),
            10_000_000_000_000,
        )
        .expect("valid");
        assert_eq!(q.service.as_deref(), Some("utilization-service"));
        assert_eq!(q.limit, 5);
        assert_eq!(q.tags.len(), 3);
        assert!(q
            .tags
            .contains(&("azure.cosmosdb.attempt".into(), "1".into())));
        assert_eq!(q.start_min_ns, Some(10_000_000_000_000 - 3_600_000_000_000));
        assert_eq!(q.min_duration_ns, Some(10_000_000));
    }

    #[test]
    fn bad_parameters_name_the_field() {
        for (name, value) in [
            ("limit", "0"),
            ("limit", "many"),
            ("tags", "{not json"),
            ("tag", "novalue"),
            ("start", "-1"),
            ("minDuration", "soon"),
            ("lookback", "forever"),
        ] {
            match parse_trace_query(&params(&[(name, value)]), 0) {
                Err(ApiProblem::InvalidParam { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }
}
