//! What the viewer adds to Jaeger's API for a tuning study: views over a window of
//! traces (a stage) and over one or two traces.
//!
//! - `GET /api/dependencies?endTs&lookback` (ms, Jaeger's shape; `endTs` defaults to
//!   now and `lookback` to 24 h as in Jaeger): service → service call counts of the
//!   window, with `errorCount` added.
//! - `GET /api/analysis/critical-path?service&operation&start&end[&compareStart&compareEnd]`
//!   (µs; `end` defaults to now, `start` to an hour before it): critical paths summed
//!   per service and operation (`trace_analysis::stage_path`), for one window or two.
//! - `GET /api/analysis/operations?service&spanKind&start&end` (µs; `spanKind`
//!   defaults to `server`): per operation, rate, error share and duration percentiles
//!   (Jaeger's Monitor tab, computed from the stored spans).
//! - `GET /api/traces/{traceId}/critical-path`: one trace's critical path and its
//!   statistics table (count, total, self time).
//! - `GET /api/analysis/compare?a&b`: two traces' statistics matched by service and
//!   operation, each row marked added / missing / longer / shorter / same.
//!
//! - `GET /api/stages`, `POST /api/stages` (`{"name", "start", "end"}`, µs): the named
//!   windows a tuning run announces as each stage ends, for the search's stage filter
//!   and the stage page's choices (a name announced again replaces the old window).
//!
//! A window is read up to [`MAX_WINDOW_SPANS`] spans, newest traces first; the answer
//! says when older ones were left out (`truncated`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use dronelab_contract::telemetry::attribute;
use trace_analysis::critical_path::{critical_path, path_spans, root_of, PathSpan};
use trace_analysis::jaeger::Envelope;
use trace_analysis::stage_path::{Percentiles, SpanLabel, StageBreakdown, StagePath};
use trace_analysis::trace_compare::{compare, statistics, CompareRow, StatisticsRow};

use crate::query::{invalid, micros_param, now_ns, stored_trace, ApiProblem};
use crate::store::{
    self, parse_trace_id, SpanKind, StageWindow, StatusCode, Store, StoredSpan, Window,
};

/// Most spans one window's analysis reads: the default store whole (viewer-bench: 24 ms
/// per 100k spans on a 2-core VM, so about 0.25 s at the cap).
pub const MAX_WINDOW_SPANS: usize = 1_000_000;
/// The default window of the analysis endpoints.
const DEFAULT_WINDOW_US: u64 = 3_600 * 1_000_000;
const DEFAULT_DEPENDENCY_LOOKBACK_MS: u64 = 24 * 3_600 * 1_000;

/// The routes, for the query API's router to merge (they share its state).
pub fn routes() -> Router<Arc<Store>> {
    Router::new()
        .route("/api/dependencies", get(dependencies))
        .route("/api/stages", get(stages).post(announce_stage))
        .route("/api/analysis/critical-path", get(stage_critical_path))
        .route("/api/analysis/operations", get(operations))
        .route("/api/analysis/compare", get(compare_traces))
        .route(
            "/api/traces/{trace_id}/critical-path",
            get(trace_critical_path),
        )
}

/// Query parameters as pairs: every value checked by name, unknown ones ignored (as
/// Jaeger does).
type Params = Query<Vec<(String, String)>>;

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(n, v)| n == name && !v.trim().is_empty())
        .map(|(_, v)| v.trim())
}

fn millis_param(
    params: &[(String, String)],
    name: &'static str,
) -> Result<Option<u64>, ApiProblem> {
    param(params, name)
        .map(|v| {
            v.parse::<u64>()
                .ok()
                .filter(|ms| *ms <= u64::MAX / 1_000_000)
                .ok_or_else(|| invalid(name, "must be milliseconds (a whole number)"))
        })
        .transpose()
}

/// A window `[start, end]` in µs from two parameters, defaults as the module says.
fn window_param(
    params: &[(String, String)],
    start: &'static str,
    end: &'static str,
) -> Result<(u64, u64), ApiProblem> {
    let end_us = match param(params, end) {
        Some(v) => micros_param(end, v)?,
        None => now_ns() / 1_000,
    };
    let start_us = match param(params, start) {
        Some(v) => micros_param(start, v)?,
        None => end_us.saturating_sub(DEFAULT_WINDOW_US),
    };
    if start_us > end_us {
        return Err(invalid(start, format!("is after {end}")));
    }
    Ok((start_us, end_us))
}

fn read_window(store: &Store, (start_us, end_us): (u64, u64)) -> Window {
    store.window(
        start_us.saturating_mul(1_000),
        end_us.saturating_mul(1_000),
        MAX_WINDOW_SPANS,
    )
}

/// Runs a window's reading — CPU work over shared traces — off the async workers.
async fn off_the_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiProblem> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiProblem::Internal(format!("the analysis stopped: {e}")))
}

fn is_error(span: &StoredSpan) -> bool {
    span.status == StatusCode::Error
        || matches!(
            span.attribute(attribute::ERROR),
            Some(store::Value::Bool(true))
        )
}

/// A trace's spans for the path algorithm (µs), parents as indices; `index` is reused
/// between traces.
fn path_of(trace: &store::Trace, index: &mut HashMap<store::SpanId, usize>) -> Vec<PathSpan> {
    index.clear();
    index.extend(trace.spans.iter().enumerate().map(|(i, s)| (s.span_id, i)));
    trace
        .spans
        .iter()
        .map(|s| PathSpan {
            parent: s.parent.and_then(|p| index.get(&p).copied()),
            start: s.start_ns / 1_000,
            end: s.end_ns / 1_000,
        })
        .collect()
}

async fn stages(State(store): State<Arc<Store>>) -> Json<Envelope<Vec<StageWindow>>> {
    let stages = store.stages();
    let total = stages.len();
    Json(Envelope::new(stages, total))
}

/// Longest stage name kept.
const MAX_STAGE_NAME: usize = 200;

async fn announce_stage(
    State(store): State<Arc<Store>>,
    body: Result<Json<StageWindow>, JsonRejection>,
) -> Result<Json<Envelope<StageWindow>>, ApiProblem> {
    let Json(stage) = body.map_err(|e| invalid("body", e.body_text()))?;
    if stage.name.trim().is_empty() || stage.name.len() > MAX_STAGE_NAME {
        return Err(invalid("name", format!("1 to {MAX_STAGE_NAME} bytes")));
    }
    if stage.start > stage.end {
        return Err(invalid("start", "is after end"));
    }
    store.announce_stage(stage.clone());
    Ok(Json(Envelope::new(stage, 1)))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Dependency {
    parent: String,
    child: String,
    call_count: u64,
    /// Ours: calls whose child span failed.
    error_count: u64,
}

async fn dependencies(
    State(store): State<Arc<Store>>,
    Query(params): Params,
) -> Result<Json<Envelope<Vec<Dependency>>>, ApiProblem> {
    let end_ms = millis_param(&params, "endTs")?.unwrap_or(now_ns() / 1_000_000);
    let lookback_ms = millis_param(&params, "lookback")?.unwrap_or(DEFAULT_DEPENDENCY_LOOKBACK_MS);
    let end_us = end_ms * 1_000;
    let window = read_window(&store, (end_us.saturating_sub(lookback_ms * 1_000), end_us));
    let mut edges: BTreeMap<(Arc<str>, Arc<str>), (u64, u64)> = BTreeMap::new();
    let mut index = HashMap::new();
    for trace in &window.traces {
        let path = path_of(trace, &mut index);
        for (span, at) in trace.spans.iter().zip(&path) {
            let Some(parent) = at.parent.map(|p| &trace.spans[p]) else {
                continue;
            };
            if parent.process.service == span.process.service {
                continue;
            }
            let edge = edges
                .entry((parent.process.service.clone(), span.process.service.clone()))
                .or_default();
            edge.0 += 1;
            edge.1 += u64::from(is_error(span));
        }
    }
    let data: Vec<Dependency> = edges
        .into_iter()
        .map(|((parent, child), (call_count, error_count))| Dependency {
            parent: parent.to_string(),
            child: child.to_string(),
            call_count,
            error_count,
        })
        .collect();
    let total = data.len();
    Ok(Json(Envelope::new(data, total)))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WindowBreakdown {
    start: u64,
    end: u64,
    traces: usize,
    spans: usize,
    truncated: bool,
    #[serde(flatten)]
    breakdown: StageBreakdown,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StageAnswer {
    service: String,
    operation: Option<String>,
    window: WindowBreakdown,
    compare: Option<WindowBreakdown>,
}

/// The request's entry into `service` in a trace: the earliest span of the service
/// (named `operation`, if given) whose parent is not of the same service.
fn entry_span(
    trace: &store::Trace,
    path: &[PathSpan],
    service: &str,
    operation: Option<&str>,
) -> Option<usize> {
    trace
        .spans
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            &*s.process.service == service
                && operation.is_none_or(|o| &*s.name == o)
                && path[*i]
                    .parent
                    .is_none_or(|p| *trace.spans[p].process.service != *service)
        })
        .min_by_key(|(_, s)| s.start_ns)
        .map(|(i, _)| i)
}

fn breakdown(
    store: &Store,
    window: (u64, u64),
    service: &str,
    operation: Option<&str>,
) -> WindowBreakdown {
    let read = read_window(store, window);
    let mut stage = StagePath::new();
    let mut index = HashMap::new();
    for trace in &read.traces {
        let path = path_of(trace, &mut index);
        let Some(entry) = entry_span(trace, &path, service, operation) else {
            continue;
        };
        stage.add(&path, entry, |i| {
            let span = &trace.spans[i];
            SpanLabel {
                service: &span.process.service,
                operation: &span.name,
                database: span.attribute(attribute::DB_SYSTEM_NAME).is_some(),
            }
        });
    }
    WindowBreakdown {
        start: window.0,
        end: window.1,
        traces: read.traces.len(),
        spans: read.spans,
        truncated: read.truncated,
        breakdown: stage.finish(),
    }
}

async fn stage_critical_path(
    State(store): State<Arc<Store>>,
    Query(params): Params,
) -> Result<Json<Envelope<StageAnswer>>, ApiProblem> {
    let service = param(&params, "service")
        .ok_or_else(|| invalid("service", "required"))?
        .to_owned();
    let operation = param(&params, "operation").map(str::to_owned);
    let window = window_param(&params, "start", "end")?;
    let compare_window = match (param(&params, "compareStart"), param(&params, "compareEnd")) {
        (None, None) => None,
        (Some(_), Some(_)) => Some(window_param(&params, "compareStart", "compareEnd")?),
        (None, Some(_)) => return Err(invalid("compareStart", "required with compareEnd")),
        (Some(_), None) => return Err(invalid("compareEnd", "required with compareStart")),
    };
    let answer = off_the_workers(move || {
        let op = operation.as_deref();
        StageAnswer {
            window: breakdown(&store, window, &service, op),
            compare: compare_window.map(|w| breakdown(&store, w, &service, op)),
            service,
            operation,
        }
    })
    .await?;
    Ok(Json(Envelope::new(answer, 1)))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct OperationRate {
    service: String,
    operation: String,
    span_kind: String,
    count: u64,
    per_second: f64,
    error_share: f64,
    duration_us: Percentiles,
}

fn parse_kind(text: &str) -> Result<Option<SpanKind>, ApiProblem> {
    Ok(Some(match text {
        "all" => return Ok(None),
        "server" => SpanKind::Server,
        "client" => SpanKind::Client,
        "internal" => SpanKind::Internal,
        "producer" => SpanKind::Producer,
        "consumer" => SpanKind::Consumer,
        _ => {
            return Err(invalid(
                "spanKind",
                "one of server, client, internal, producer, consumer, all",
            ))
        }
    }))
}

async fn operations(
    State(store): State<Arc<Store>>,
    Query(params): Params,
) -> Result<Json<Envelope<Vec<OperationRate>>>, ApiProblem> {
    let service = param(&params, "service").map(str::to_owned);
    let kind = parse_kind(param(&params, "spanKind").unwrap_or("server"))?;
    let window = window_param(&params, "start", "end")?;
    let rows = off_the_workers(move || {
        operation_rates(
            &read_window(&store, window),
            service.as_deref(),
            kind,
            window,
        )
    })
    .await?;
    let total = rows.len();
    Ok(Json(Envelope::new(rows, total)))
}

fn operation_rates(
    window: &Window,
    service: Option<&str>,
    kind: Option<SpanKind>,
    (start_us, end_us): (u64, u64),
) -> Vec<OperationRate> {
    type Key = (Arc<str>, Arc<str>, SpanKind);
    let mut groups: BTreeMap<Key, (Vec<u64>, u64)> = BTreeMap::new();
    for span in window.traces.iter().flat_map(|t| &t.spans) {
        if service.is_some_and(|s| *span.process.service != *s)
            || kind.is_some_and(|k| span.kind != k)
        {
            continue;
        }
        let group = groups
            .entry((span.process.service.clone(), span.name.clone(), span.kind))
            .or_default();
        group.0.push(span.duration_ns() / 1_000);
        group.1 += u64::from(is_error(span));
    }
    let seconds = ((end_us - start_us) as f64 / 1e6).max(1e-6);
    groups
        .into_iter()
        .map(|((service, operation, kind), (mut durations, errors))| {
            let count = durations.len() as u64;
            OperationRate {
                service: service.to_string(),
                operation: operation.to_string(),
                span_kind: kind.jaeger_name().unwrap_or_default().to_owned(),
                count,
                per_second: count as f64 / seconds,
                error_share: errors as f64 / count as f64,
                duration_us: Percentiles::of(&mut durations, 0),
            }
        })
        .collect()
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PathSection {
    #[serde(rename = "spanID")]
    span_id: String,
    /// µs since the Unix epoch.
    start: u64,
    end: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TracePath {
    #[serde(rename = "traceID")]
    trace_id: String,
    critical_path: Vec<PathSection>,
    statistics: Vec<StatisticsRow>,
}

async fn trace_critical_path(
    State(store): State<Arc<Store>>,
    Path(trace_id): Path<String>,
) -> Result<Json<Envelope<TracePath>>, ApiProblem> {
    let trace = stored_trace(&store, &trace_id)?;
    let spans = path_spans(&trace);
    let sections = root_of(&spans).map_or_else(Vec::new, |root| critical_path(&spans, root));
    let answer = TracePath {
        critical_path: sections
            .iter()
            .map(|s| PathSection {
                span_id: trace.spans[s.span].span_id.clone(),
                start: s.start,
                end: s.end,
            })
            .collect(),
        statistics: statistics(&trace),
        trace_id: trace.trace_id,
    };
    Ok(Json(Envelope::new(answer, 1)))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CompareAnswer {
    a: String,
    b: String,
    rows: Vec<CompareRow>,
}

async fn compare_traces(
    State(store): State<Arc<Store>>,
    Query(params): Params,
) -> Result<Json<Envelope<CompareAnswer>>, ApiProblem> {
    let id = |name: &'static str| {
        param(&params, name)
            .filter(|v| parse_trace_id(v).is_some())
            .ok_or_else(|| invalid(name, "required: a trace ID (1 to 32 hexadecimal digits)"))
    };
    let (a, b) = (id("a")?, id("b")?);
    let trace_a = stored_trace(&store, a)?;
    let trace_b = stored_trace(&store, b)?;
    let rows = compare(&statistics(&trace_a), &statistics(&trace_b));
    Ok(Json(Envelope::new(
        CompareAnswer {
            a: trace_a.trace_id,
            b: trace_b.trace_id,
            rows,
        },
        1,
    )))
}
