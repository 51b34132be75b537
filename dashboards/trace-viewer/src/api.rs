//! The Jaeger-compatible query API and the web UI. The parameter rules are those of
//! Jaeger's query service (`cmd/query/app/query_parser.go`, `http_handler.go`); where
//! the viewer adds to them, the rule says so.
//!
//! - `GET /api/services`, `GET /api/services/{service}/operations`,
//!   `GET /api/operations?service=&spanKind=` (an unknown service has no operations:
//!   200 with an empty list, as Jaeger answers)
//! - `GET /api/traces?service&operation&tags&tag&limit&lookback&start&end&minDuration&maxDuration`,
//!   or `GET /api/traces?traceID=…&traceID=…` (those traces exactly)
//! - `GET /api/traces/{traceId}`
//! - ours: `GET /api/traces/{traceId}/summary` (Cosmos calls, RU, concurrency, retry
//!   waits), `GET /api/stats` (store counters)
//! - ours, in [`crate::analysis`] (merged here): dependencies, critical paths of a trace
//!   and of a window, operations, trace comparison, stages
//! - `GET /`, `/search`, `/trace/{traceId}`, `/compare`, `/stage`, `/services`: the UI
//!   (assets compiled into the binary).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use trace_analysis::jaeger::{self, ApiError, Envelope, Operation};
use trace_analysis::summary::{summarize, TraceSummary};

use crate::jaeger::from_stored;
pub use crate::query::ApiProblem;
use crate::query::{invalid, micros_param, now_ns, stored_trace};
use crate::store::{parse_trace_id, Store, StoreStats, TraceId, TraceQuery};

/// Traces returned when `limit` is not given (Jaeger's query service's default).
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 10_000;
/// How far back a search looks when it gives no `start` (Jaeger's default, 2 days).
pub const DEFAULT_LOOKBACK_NS: u64 = 2 * 86_400 * 1_000_000_000;

pub fn router(store: Arc<Store>) -> Router {
    let metrics = lifecycle::metrics::MetricsRegistry::default();
    metrics.register_collector(crate::metrics::StoreCollector(store.clone()));
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
        .merge(crate::analysis::routes())
        // The viewer's own CPU and memory, so a dashboard shows what tracing costs, and
        // the store's counters.
        .route("/metrics", metrics.route())
        .route("/", get(index))
        .route("/search", get(index))
        .route("/trace/{trace_id}", get(index))
        .route("/compare", get(index))
        .route("/stage", get(index))
        .route("/services", get(index))
        .route("/assets/names.js", get(names_js))
        .route("/assets/{name}", get(asset))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(store)
}

async fn services(State(store): State<Arc<Store>>) -> Json<Envelope<Vec<String>>> {
    let services = store.services();
    let total = services.len();
    Json(Envelope::new(services, total))
}

/// A service's operation names; none for a service the viewer has not seen (Jaeger:
/// 200 with an empty list, not 404).
async fn service_operations(
    State(store): State<Arc<Store>>,
    Path(service): Path<String>,
) -> Json<Envelope<Vec<String>>> {
    let mut names: Vec<String> = store
        .operations(&service)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.dedup();
    let total = names.len();
    Json(Envelope::new(names, total))
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
        .unwrap_or_default()
        .into_iter()
        .map(|(name, kind)| Operation {
            name,
            // Jaeger lists an operation of unspecified kind with an empty kind.
            span_kind: kind.jaeger_name().unwrap_or_default().to_owned(),
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

/// A search, or the traces asked for by `traceID` (repeatable): those found, and an
/// error naming each that is not (Jaeger's answer; `total` is 0 on a search, as there).
async fn find_traces(
    State(store): State<Arc<Store>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Envelope<Vec<jaeger::Trace>>>, ApiProblem> {
    let search = parse_search(&params, now_ns())?;
    let answer = match search {
        Search::Query(query) => Envelope::new(store.find(&query, from_stored), 0),
        Search::TraceIds(ids) => {
            let mut traces = Vec::new();
            let mut missing = Vec::new();
            for (text, id) in ids {
                match store.get(&id, from_stored) {
                    Some(trace) => traces.push(trace),
                    None => missing.push(ApiError {
                        code: StatusCode::NOT_FOUND.as_u16(),
                        msg: "trace not found".into(),
                        trace_id: Some(text),
                    }),
                }
            }
            let mut envelope = Envelope::new(traces, 0);
            envelope.errors = (!missing.is_empty()).then_some(missing);
            envelope
        }
    };
    Ok(Json(answer))
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

/// The UI's files, compiled into the binary: one script per page, loaded in this order.
const ASSETS: &[(&str, &str)] = &[
    ("common.js", include_str!("ui/common.js")),
    ("search.js", include_str!("ui/search.js")),
    ("trace.js", include_str!("ui/trace.js")),
    ("compare.js", include_str!("ui/compare.js")),
    ("stage.js", include_str!("ui/stage.js")),
    ("services.js", include_str!("ui/services.js")),
    ("app.js", include_str!("ui/app.js")),
    ("style.css", include_str!("ui/style.css")),
];

async fn asset(Path(name): Path<String>) -> Response {
    let Some((_, body)) = ASSETS.iter().find(|(n, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let content_type = if name.ends_with(".css") {
        "text/css; charset=utf-8"
    } else {
        "text/javascript; charset=utf-8"
    };
    ([(header::CONTENT_TYPE, content_type)], *body).into_response()
}

/// What `/api/traces` was asked: a search, or traces by ID (which win over the search
/// parameters, as in Jaeger).
#[derive(Debug, Clone, PartialEq)]
pub enum Search {
    Query(TraceQuery),
    /// Each ID as written, and parsed.
    TraceIds(Vec<(String, TraceId)>),
}

/// Parses `/api/traces`' parameters (every one checked, then `service` required unless
/// `traceID` is given, then `traceID`s).
pub fn parse_search(params: &[(String, String)], now_ns: u64) -> Result<Search, ApiProblem> {
    let query = parse_trace_query(params, now_ns)?;
    let mut ids = Vec::new();
    for (_, value) in params.iter().filter(|(name, _)| name == "traceID") {
        let id = parse_trace_id(value.trim())
            .ok_or_else(|| ApiProblem::BadTraceIdParam(value.clone()))?;
        ids.push((value.trim().to_owned(), id));
    }
    if !ids.is_empty() {
        return Ok(Search::TraceIds(ids));
    }
    if query.service.is_none() {
        return Err(ApiProblem::ServiceRequired);
    }
    Ok(Search::Query(query))
}

/// Parses Jaeger's search parameters. `tags` is a JSON object of tag → string value;
/// `tag` may repeat as `key:value`; `start`/`end` are µs since the epoch (`end`
/// defaults to now, `start` to `end` less two days); `minDuration`/`maxDuration` are Go
/// durations (ns, us or µs, ms, s, m, h). The viewer adds `lookback` (Jaeger UI's own
/// parameter, which Jaeger's query service ignores): a duration, also in days (`2d`),
/// that sets `start` when `start` is not given (`custom` leaves it to `start`).
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
                // Jaeger reads it into a map of strings: another value type is a 400.
                let object: std::collections::BTreeMap<String, String> =
                    serde_json::from_str(value).map_err(|e| {
                        invalid(
                            "tags",
                            format!("must be a JSON object of tag to string value: {e}"),
                        )
                    })?;
                query.tags.extend(object);
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
                    Some(go_duration_ns(value).map_err(|e| invalid("minDuration", e.to_string()))?)
            }
            "maxDuration" => {
                query.max_duration_ns =
                    Some(go_duration_ns(value).map_err(|e| invalid("maxDuration", e.to_string()))?)
            }
            "lookback" if value != "custom" => {
                lookback = Some(duration_ns(value).map_err(|e| invalid("lookback", e.to_string()))?)
            }
            _ => {}
        }
    }
    let end = query.start_max_ns.unwrap_or(now_ns);
    if query.start_min_ns.is_none() {
        let back = lookback.unwrap_or(DEFAULT_LOOKBACK_NS);
        query.start_min_ns = Some(end.saturating_sub(back));
    }
    if let (Some(min), Some(max)) = (query.min_duration_ns, query.max_duration_ns) {
        if min > max {
            return Err(invalid("minDuration", "is greater than maxDuration"));
        }
    }
    Ok(query)
}

/// A duration parameter that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a Go duration (units ns, us, ms, s, m, h; no days)")]
    Days(String),
    #[error("{0:?} is not a duration like 100ms, 1.5s or 2h")]
    Malformed(String),
}

/// A Go duration as Jaeger's `minDuration`/`maxDuration` take it (`time.ParseDuration`:
/// ns, us or µs, ms, s, m, h — no days).
pub fn go_duration_ns(text: &str) -> Result<u64, DurationError> {
    if text.contains('d') {
        return Err(DurationError::Days(text.to_owned()));
    }
    duration_ns(text)
}

/// Go-style durations: `250ms`, `1.5s`, `1h30m`, `500us`, and `d` for days (the
/// viewer's `lookback`).
pub fn duration_ns(text: &str) -> Result<u64, DurationError> {
    let bad = || DurationError::Malformed(text.to_owned());
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
                    r#"{"db.response.status_code":"429","azure.cosmosdb.attempt":"1"}"#,
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
            ("tags", r#"{"attempt":1}"#),
            ("minDuration", "1d"),
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
