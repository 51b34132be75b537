//! What one trace says about Cosmos DB: attempts, 429s, request units, how many attempts
//! ran at once, how many partition key ranges were touched, and the time lost between a
//! 429 and its retry. Works on the Jaeger model, so it reads traces from any
//! Jaeger-compatible API; the UI's per-trace summary and `loadtest diagnose` share it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use dronelab_contract::telemetry::attribute::{
    COSMOS_PARTITION_KEY_RANGE_ID as RANGE, COSMOS_REQUEST_CHARGE as CHARGE,
    DB_RESPONSE_STATUS_CODE as STATUS, DB_SYSTEM_NAME, ERROR, INVOICE_MONTH, INVOICE_MONTH_CLOSED,
    OWNER_ID, SPAN_KIND, TASK_POLL_CPU_US, TASK_SLOW_POLL_US,
};
use dronelab_contract::telemetry::COSMOS_DB_SYSTEM;

use crate::jaeger::{Span, Trace};

/// Cosmos activity and server time of one service within a trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSummary {
    pub service: String,
    /// Sum of the service's server-span durations (µs).
    pub server_time_us: u64,
    pub cosmos_attempts: usize,
    pub cosmos_throttled: usize,
    pub request_units: f64,
    /// Most Cosmos attempts of this service in flight at one instant.
    pub max_concurrent_attempts: usize,
    /// Distinct partition key range ids its attempts reached.
    pub partition_ranges: usize,
    /// Time from sending a throttled attempt to sending its retry, summed (µs).
    pub retry_wait_us: u64,
    /// Time its requests' futures held a runtime worker in slow polls without computing
    /// (the server spans' [`TASK_SLOW_POLL_US`] less their [`TASK_POLL_CPU_US`]), summed
    /// (µs): waiting inside a poll, a blocking call.
    #[serde(default)]
    pub blocked_us: u64,
    /// Logical Cosmos operations: distinct spans its attempts hang under (a query per
    /// feed range counts once per range, a retried call once).
    #[serde(default)]
    pub cosmos_operations: usize,
    /// Logical operations to a partition key range one of its earlier operations in the
    /// trace already reached: round trips one query per range would have saved.
    #[serde(default)]
    pub extra_operations: usize,
    /// Its outgoing calls other than Cosmos attempts, by span name: a call's attempts
    /// are its client spans of one name under one parent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallRetries>,
    /// Request units charged per partition key range: where its demand falls.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub request_units_by_range: BTreeMap<String, f64>,
    /// 429s per partition key range: the range an attempt names, else the one range its
    /// operation's other attempts reached (a throttled attempt may carry none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub throttled_by_range: BTreeMap<String, usize>,
}

/// One kind of outgoing call of a service in a trace (e.g. the gateway's
/// `GET deliveries`), with its retries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRetries {
    pub name: String,
    pub calls: usize,
    /// Attempts after a call's first.
    pub retries: usize,
    /// Retries sent within [`IMMEDIATE_RETRY_US`] of the attempt before them ended.
    pub immediate_retries: usize,
}

/// A retry this soon after the attempt before it had no backoff (µs).
pub const IMMEDIATE_RETRY_US: u64 = 2_000;

/// The gap between a 429 attempt and the retry that followed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryWait {
    #[serde(rename = "throttledSpanID")]
    pub throttled_span_id: String,
    #[serde(rename = "retrySpanID")]
    pub retry_span_id: Option<String>,
    /// From the end of the 429 attempt (µs since the epoch)…
    pub start_time: u64,
    /// …to the start of the retry (µs).
    pub duration: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceSummary {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    pub root_service: String,
    pub root_operation: String,
    pub start_time: u64,
    pub duration_us: u64,
    pub spans: usize,
    pub error_spans: usize,
    pub cosmos_attempts: usize,
    pub cosmos_throttled: usize,
    pub request_units: f64,
    /// Across all services of the trace.
    pub max_concurrent_attempts: usize,
    pub services: Vec<ServiceSummary>,
    pub retry_waits: Vec<RetryWait>,
    /// `<owner> <YYYY-MM>` when the root span asked for a closed month (whose answer
    /// can no longer change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_month_key: Option<String>,
    /// The root span called out (a client span under it): the answer was computed,
    /// not served from a cache.
    #[serde(default)]
    pub recomputed: bool,
}

impl TraceSummary {
    pub fn service(&self, name: &str) -> Option<&ServiceSummary> {
        self.services.iter().find(|s| s.service == name)
    }
}

pub fn is_cosmos_attempt(span: &Span) -> bool {
    span.tag_text(DB_SYSTEM_NAME).as_deref() == Some(COSMOS_DB_SYSTEM) && span.tag(STATUS).is_some()
}

fn is_throttled(span: &Span) -> bool {
    span.tag_text(STATUS).as_deref() == Some("429")
}

pub(crate) fn is_error(span: &Span) -> bool {
    span.tag(ERROR) == Some(&serde_json::Value::Bool(true))
}

/// Most intervals `[start, end)` overlapping at one instant.
fn max_overlap<'a>(spans: impl Iterator<Item = &'a Span>) -> usize {
    let mut edges: Vec<(u64, i32)> = spans
        .flat_map(|s| [(s.start_time, 1), (s.end_time().max(s.start_time + 1), -1)])
        .collect();
    // Ends sort before starts at the same instant: back-to-back is not concurrent.
    edges.sort_unstable();
    let mut current = 0i32;
    let mut max = 0i32;
    for (_, delta) in edges {
        current += delta;
        max = max.max(current);
    }
    max as usize
}

/// For each 429 attempt, the next attempt under the same parent (and the same range,
/// when known) — the SDK's retry.
fn retry_waits(attempts: &[&Span]) -> Vec<RetryWait> {
    attempts
        .iter()
        .filter(|a| is_throttled(a))
        .map(|throttled| {
            let range = throttled.tag_text(RANGE);
            let retry = attempts
                .iter()
                .filter(|b| {
                    b.span_id != throttled.span_id
                        && b.parent_id() == throttled.parent_id()
                        && b.start_time >= throttled.start_time
                        && (range.is_none()
                            || b.tag_text(RANGE).is_none()
                            || b.tag_text(RANGE) == range)
                })
                .min_by_key(|b| b.start_time);
            let end = throttled.end_time();
            RetryWait {
                throttled_span_id: throttled.span_id.clone(),
                retry_span_id: retry.map(|r| r.span_id.clone()),
                start_time: end,
                duration: retry.map_or(0, |r| r.start_time.saturating_sub(end)),
            }
        })
        .collect()
}

/// The service's outgoing calls by name, from its client spans that are not Cosmos
/// attempts: one call per (parent, name), its attempts in start order.
fn call_retries(spans: &[&Span]) -> Vec<CallRetries> {
    let mut attempts: BTreeMap<(&str, Option<&str>), Vec<&Span>> = BTreeMap::new();
    for span in spans {
        if span.tag_text(SPAN_KIND).as_deref() == Some("client") && !is_cosmos_attempt(span) {
            attempts
                .entry((span.operation_name.as_str(), span.parent_id()))
                .or_default()
                .push(span);
        }
    }
    let mut by_name: BTreeMap<&str, CallRetries> = BTreeMap::new();
    for ((name, _), mut call) in attempts {
        call.sort_by_key(|s| s.start_time);
        let entry = by_name.entry(name).or_insert_with(|| CallRetries {
            name: name.to_owned(),
            ..CallRetries::default()
        });
        entry.calls += 1;
        entry.retries += call.len() - 1;
        entry.immediate_retries += call
            .windows(2)
            .filter(|pair| {
                pair[1].start_time.saturating_sub(pair[0].end_time()) < IMMEDIATE_RETRY_US
            })
            .count();
    }
    by_name.into_values().collect()
}

/// 429s by partition key range, from the operations that reached exactly one range (a
/// read, or a query with its partition key or for one feed range). A throttled attempt
/// there without a range of its own counts on that range when a later attempt answered
/// it (the SDK retries the same request); one never answered (its retries spent, or the
/// request cancelled) is left out. A cross-partition operation's 429s are left out too:
/// it visits the ranges in an order of its own, which says more about where they fall
/// than any neighbour (placed by their retries, 68–71 % of the serial baseline's 429s
/// fell on range 0, which carries a ninth of its request units).
fn throttled_by_range(attempts: &[&Span]) -> BTreeMap<String, usize> {
    let mut by_operation: BTreeMap<Option<&str>, Vec<&Span>> = BTreeMap::new();
    for attempt in attempts {
        by_operation
            .entry(attempt.parent_id())
            .or_default()
            .push(attempt);
    }
    let mut by_range = BTreeMap::new();
    for mut operation in by_operation.into_values() {
        let ranges: BTreeSet<String> = operation.iter().filter_map(|a| a.tag_text(RANGE)).collect();
        let Some(range) = ranges.first().filter(|_| ranges.len() == 1) else {
            continue;
        };
        operation.sort_by_key(|a| a.start_time);
        let placed = operation
            .iter()
            .enumerate()
            .filter(|(i, attempt)| {
                is_throttled(attempt)
                    && (attempt.tag(RANGE).is_some()
                        || operation[i + 1..].iter().any(|a| a.tag(RANGE).is_some()))
            })
            .count();
        if placed > 0 {
            *by_range.entry(range.clone()).or_insert(0) += placed;
        }
    }
    by_range
}

/// Request units charged by partition key range.
fn request_units_by_range(attempts: &[&Span]) -> BTreeMap<String, f64> {
    let mut by_range = BTreeMap::new();
    for attempt in attempts {
        if let (Some(range), Some(ru)) = (attempt.tag_text(RANGE), attempt.tag_f64(CHARGE)) {
            *by_range.entry(range).or_insert(0.0) += ru;
        }
    }
    by_range
}

/// `<owner> <YYYY-MM>` of a span that asked for a closed month.
fn closed_month_key(span: &Span) -> Option<String> {
    if span.tag(INVOICE_MONTH_CLOSED) != Some(&serde_json::Value::Bool(true)) {
        return None;
    }
    Some(format!(
        "{} {}",
        span.tag_text(OWNER_ID)?,
        span.tag_text(INVOICE_MONTH)?
    ))
}

/// Time its server spans say their futures spent in slow polls without computing (µs):
/// each span's slow-poll time less the CPU time of all its polls (a span without the
/// CPU figure counts its slow polls whole).
fn blocked(spans: &[&Span]) -> u64 {
    spans
        .iter()
        .filter(|s| s.tag_text(SPAN_KIND).as_deref() == Some("server"))
        .filter_map(|s| {
            let slow = s.tag_f64(TASK_SLOW_POLL_US)?;
            let cpu = s.tag_f64(TASK_POLL_CPU_US).unwrap_or(0.0);
            Some((slow - cpu).max(0.0) as u64)
        })
        .sum()
}

/// Logical operations (attempts under one parent) beyond the first to reach each range,
/// within each request the service served (its server spans): a cross-partition query
/// reaches each range once, a list and a read per item reach the item's range again. A
/// request retried by its caller is another server span, so its ranges count afresh.
/// Attempts without a range (a 429 carries none) say nothing about where they went.
fn extra_operations<'a>(spans: &[&'a Span], attempts: &[&'a Span]) -> usize {
    let by_id: BTreeMap<&'a str, &'a Span> =
        spans.iter().map(|s| (s.span_id.as_str(), *s)).collect();
    let mut operations: BTreeMap<(Option<&str>, String), BTreeSet<Option<&str>>> = BTreeMap::new();
    for attempt in attempts {
        let Some(range) = attempt.tag_text(RANGE).filter(|r| !r.is_empty()) else {
            continue;
        };
        let operation = attempt.parent_id();
        operations
            .entry((request_of(&by_id, operation), range))
            .or_default()
            .insert(operation);
    }
    operations.values().map(|ops| ops.len() - 1).sum()
}

/// The server span (of the same service) `id` runs under, if any.
fn request_of<'a>(by_id: &BTreeMap<&'a str, &'a Span>, mut id: Option<&'a str>) -> Option<&'a str> {
    // A trace's spans are finite; a cycle in malformed input stops here.
    for _ in 0..64 {
        let span = by_id.get(id?)?;
        if span.tag_text(SPAN_KIND).as_deref() == Some("server") {
            return Some(span.span_id.as_str());
        }
        id = span.parent_id();
    }
    None
}

/// One service's part of a trace; its retry waits go into `retry_waits_all`.
fn summarize_service(
    service: &str,
    spans: &[&Span],
    retry_waits_all: &mut Vec<RetryWait>,
) -> ServiceSummary {
    let attempts: Vec<&Span> = spans
        .iter()
        .copied()
        .filter(|s| is_cosmos_attempt(s))
        .collect();
    let waits = retry_waits(&attempts);
    let retry_wait_us = waits
        .iter()
        .filter_map(|w| {
            let throttled = attempts.iter().find(|a| a.span_id == w.throttled_span_id)?;
            Some(throttled.duration + w.duration)
        })
        .sum();
    retry_waits_all.extend(waits);
    ServiceSummary {
        service: service.to_owned(),
        server_time_us: spans
            .iter()
            .filter(|s| s.tag_text(SPAN_KIND).as_deref() == Some("server"))
            .map(|s| s.duration)
            .sum(),
        cosmos_attempts: attempts.len(),
        cosmos_throttled: attempts.iter().filter(|a| is_throttled(a)).count(),
        request_units: attempts
            .iter()
            .filter_map(|a| a.tag_f64(CHARGE))
            .fold(0.0, |sum, ru| sum + ru),
        max_concurrent_attempts: max_overlap(attempts.iter().copied()),
        partition_ranges: attempts
            .iter()
            .filter_map(|a| a.tag_text(RANGE))
            .collect::<BTreeSet<_>>()
            .len(),
        retry_wait_us,
        blocked_us: blocked(spans),
        cosmos_operations: attempts
            .iter()
            .filter_map(|a| a.parent_id())
            .collect::<BTreeSet<_>>()
            .len(),
        extra_operations: extra_operations(spans, &attempts),
        calls: call_retries(spans),
        request_units_by_range: request_units_by_range(&attempts),
        throttled_by_range: throttled_by_range(&attempts),
    }
}

/// Summarises one trace.
pub fn summarize(trace: &Trace) -> TraceSummary {
    let root = trace.root();
    let mut by_service: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for span in &trace.spans {
        by_service
            .entry(trace.service_of(span))
            .or_default()
            .push(span);
    }
    let mut retry_waits_all = Vec::new();
    let services = by_service
        .iter()
        .map(|(service, spans)| summarize_service(service, spans, &mut retry_waits_all))
        .collect::<Vec<_>>();
    TraceSummary {
        trace_id: trace.trace_id.clone(),
        root_service: root
            .map(|r| trace.service_of(r).to_owned())
            .unwrap_or_default(),
        root_operation: root.map(|r| r.operation_name.clone()).unwrap_or_default(),
        start_time: trace.spans.iter().map(|s| s.start_time).min().unwrap_or(0),
        duration_us: trace
            .spans
            .iter()
            .map(|s| s.end_time())
            .max()
            .unwrap_or(0)
            .saturating_sub(trace.spans.iter().map(|s| s.start_time).min().unwrap_or(0)),
        spans: trace.spans.len(),
        error_spans: trace.spans.iter().filter(|s| is_error(s)).count(),
        cosmos_attempts: services.iter().map(|s| s.cosmos_attempts).sum(),
        cosmos_throttled: services.iter().map(|s| s.cosmos_throttled).sum(),
        request_units: services.iter().fold(0.0, |sum, s| sum + s.request_units),
        max_concurrent_attempts: max_overlap(trace.spans.iter().filter(|s| is_cosmos_attempt(s))),
        services,
        retry_waits: retry_waits_all,
        closed_month_key: root.and_then(closed_month_key),
        recomputed: root.is_some_and(|r| {
            trace.spans.iter().any(|s| {
                s.parent_id() == Some(r.span_id.as_str())
                    && s.tag_text(SPAN_KIND).as_deref() == Some("client")
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jaeger::Process;

    fn span(
        id: &str,
        parent: Option<&str>,
        start: u64,
        duration: u64,
        tags: &[(&str, &str)],
    ) -> Span {
        let tags: Vec<(&str, serde_json::Value)> =
            tags.iter().map(|(k, v)| (*k, (*v).into())).collect();
        crate::jaeger::testing::span(id, parent, (start, duration), "p1", &tags)
    }

    fn attempt(
        id: &str,
        parent: &str,
        start: u64,
        duration: u64,
        status: &str,
        range: &str,
    ) -> Span {
        span(
            id,
            Some(parent),
            start,
            duration,
            &[
                ("db.system.name", COSMOS_DB_SYSTEM),
                (STATUS, status),
                (CHARGE, "2.5"),
                (RANGE, range),
            ],
        )
    }

    fn trace(spans: Vec<Span>) -> Trace {
        Trace {
            trace_id: "t".into(),
            spans,
            processes: [(
                "p1".to_owned(),
                Process {
                    service_name: "utilization-service".into(),
                    tags: vec![],
                },
            )]
            .into(),
            warnings: None,
        }
    }

    #[test]
    fn operations_count_the_spans_attempts_hang_under_and_extra_ones_reach_a_range_again() {
        let t = trace(vec![
            span("s1", None, 0, 1000, &[("span.kind", "server")]),
            // A list over ranges 0 and 1, then a read in range 0 and one in range 2.
            span("q1", Some("s1"), 10, 100, &[]),
            attempt("a1", "q1", 10, 50, "200", "0"),
            attempt("a1b", "q1", 60, 50, "200", "1"),
            span("r1", Some("s1"), 200, 100, &[]),
            attempt("a2", "r1", 200, 50, "200", "0"),
            // A read retried after a 429 is still one operation.
            span("r2", Some("s1"), 400, 300, &[]),
            attempt("a3", "r2", 400, 10, "429", "2"),
            attempt("a4", "r2", 500, 10, "200", "2"),
        ]);
        let u = &summarize(&t).services[0];
        assert_eq!((u.cosmos_attempts, u.cosmos_operations), (5, 3));
        assert_eq!(u.extra_operations, 1, "range 0 reached twice");
        // A query per range (a parallel cross-partition query) reaches each once.
        let fan_out = trace(vec![
            span("s1", None, 0, 1000, &[("span.kind", "server")]),
            attempt("p0", "s1", 10, 50, "200", "0"),
            span("q2", Some("s1"), 10, 100, &[]),
            attempt("p1", "q2", 10, 50, "200", "1"),
            span("q3", Some("s1"), 10, 100, &[]),
            attempt("p2", "q3", 10, 50, "200", "2"),
        ]);
        assert_eq!(summarize(&fan_out).services[0].extra_operations, 0);
        // Its caller retried the request: the second request's query reaches the same
        // range again, within a request of its own; a 429 without a range counts nowhere.
        let retried = trace(vec![
            span("s1", None, 0, 1000, &[("span.kind", "server")]),
            span("q1", Some("s1"), 10, 100, &[]),
            attempt("b1", "q1", 10, 50, "200", "0"),
            span("s2", None, 2000, 1000, &[("span.kind", "server")]),
            span("q2", Some("s2"), 2010, 100, &[]),
            attempt("b2", "q2", 2010, 50, "200", "0"),
            span("q3", Some("s2"), 2200, 100, &[]),
            attempt("b3", "q3", 2200, 50, "429", ""),
        ]);
        assert_eq!(summarize(&retried).services[0].extra_operations, 0);
    }

    #[test]
    fn blocked_time_is_slow_polls_beyond_the_cpu_the_polls_took() {
        let server = |id: &str, slow: &str, cpu: &str| {
            span(
                id,
                None,
                0,
                100,
                &[
                    ("span.kind", "server"),
                    (TASK_SLOW_POLL_US, slow),
                    (TASK_POLL_CPU_US, cpu),
                ],
            )
        };
        let t = trace(vec![
            // A 20 ms blocking call in 0.5 ms of computing.
            server("s1", "20000", "500"),
            // Slow polls that computed all along (a busy join of many responses).
            server("s2", "6400", "8000"),
            span("c1", Some("s1"), 10, 30, &[(TASK_SLOW_POLL_US, "999")]),
        ]);
        assert_eq!(summarize(&t).services[0].blocked_us, 19_500);
    }

    #[test]
    fn a_429_counts_on_its_operations_one_range_once_a_retry_reached_it() {
        let throttled = |id: &str, parent: &str, start: u64| {
            span(
                id,
                Some(parent),
                start,
                10,
                &[
                    ("db.system.name", COSMOS_DB_SYSTEM),
                    (STATUS, "429"),
                    (CHARGE, "0"),
                ],
            )
        };
        let t = trace(vec![
            span("s1", None, 0, 1000, &[("span.kind", "server")]),
            // A read throttled twice, answered by range 4.
            span("r1", Some("s1"), 0, 300, &[]),
            throttled("a1", "r1", 0),
            throttled("a2", "r1", 100),
            attempt("a3", "r1", 200, 10, "200", "4"),
            // A 429 that names its range counts there.
            span("r2", Some("s1"), 400, 100, &[]),
            attempt("a4", "r2", 400, 10, "429", "7"),
            attempt("a5", "r2", 450, 10, "200", "7"),
            // Cross-partition queries: their 429s are not placed, whether one names its
            // range, is answered on two ranges at once, or is answered later on one.
            span("q1", Some("s1"), 600, 300, &[]),
            throttled("a6", "q1", 600),
            attempt("a7", "q1", 700, 10, "200", "1"),
            attempt("a8", "q1", 700, 10, "200", "2"),
            span("q2", Some("s1"), 1000, 300, &[]),
            attempt("a9", "q2", 1000, 10, "200", "0"),
            throttled("a10", "q2", 1100),
            attempt("a11", "q2", 1200, 10, "429", "5"),
            attempt("a12", "q2", 1300, 10, "200", "5"),
            // A query cut off by a 429 after range 0's answer: it may be the next
            // range's, so it is nobody's.
            span("q3", Some("s1"), 1400, 300, &[]),
            attempt("a13", "q3", 1400, 10, "200", "0"),
            throttled("a14", "q3", 1500),
        ]);
        let u = &summarize(&t).services[0];
        assert_eq!(
            u.throttled_by_range,
            BTreeMap::from([("4".to_owned(), 2), ("7".to_owned(), 1)])
        );
        assert_eq!(u.cosmos_throttled, 7);
        // Request units by range: 2.5 per answered attempt, the 429 of range 7 too.
        assert_eq!(u.request_units_by_range.get("4"), Some(&2.5));
        assert_eq!(u.request_units_by_range.get("7"), Some(&5.0));
        assert_eq!(u.request_units_by_range.len(), 6);
    }

    #[test]
    fn a_calls_attempts_are_its_client_spans_of_one_name_under_one_parent() {
        let client = |id: &str, parent: &str, start: u64, name: &str| {
            let mut s = span(id, Some(parent), start, 10, &[("span.kind", "client")]);
            s.operation_name = name.into();
            s
        };
        let t = trace(vec![
            span("s1", None, 0, 1000, &[("span.kind", "server")]),
            // Three attempts: a retry 1 µs after the first ended, one 5 ms after the second.
            client("d1", "s1", 0, "GET deliveries"),
            client("d2", "s1", 11, "GET deliveries"),
            client("d3", "s1", 5021, "GET deliveries"),
            client("p1", "s1", 0, "GET packages"),
            span("s2", None, 0, 1000, &[("span.kind", "server")]),
            client("d4", "s2", 0, "GET deliveries"),
            // Cosmos attempts are not calls of this kind.
            attempt("a1", "s1", 0, 10, "429", "0"),
            attempt("a2", "s1", 20, 10, "200", "0"),
        ]);
        let calls = &summarize(&t).services[0].calls;
        let find = |name: &str| {
            calls
                .iter()
                .find(|c| c.name == name)
                .cloned()
                .unwrap_or_default()
        };
        let deliveries = find("GET deliveries");
        assert_eq!(
            (
                deliveries.calls,
                deliveries.retries,
                deliveries.immediate_retries
            ),
            (2, 2, 1)
        );
        assert_eq!(
            (find("GET packages").calls, find("GET packages").retries),
            (1, 0)
        );
        assert_eq!(calls.len(), 2, "{calls:?}");
    }

    #[test]
    fn serial_attempts_with_a_throttle_and_its_retry() {
        let t = trace(vec![
            span("root", None, 0, 1000, &[("span.kind", "server")]),
            attempt("a1", "root", 10, 50, "200", "0"),
            attempt("a2", "root", 60, 40, "429", "1"),
            attempt("a3", "root", 400, 50, "200", "1"),
            attempt("a4", "root", 450, 50, "200", "2"),
        ]);
        let s = summarize(&t);
        assert_eq!(s.cosmos_attempts, 4);
        assert_eq!(s.cosmos_throttled, 1);
        assert_eq!(
            s.max_concurrent_attempts, 1,
            "back-to-back is not concurrent"
        );
        assert!((s.request_units - 10.0).abs() < 1e-9);
        let u = s.service("utilization-service").expect("service");
        assert_eq!(u.partition_ranges, 3);
        assert_eq!(u.server_time_us, 1000);
        assert_eq!(
            u.retry_wait_us, 340,
            "from sending the 429 attempt to its retry"
        );
        assert_eq!(s.retry_waits.len(), 1);
        assert_eq!(s.retry_waits[0].start_time, 100);
        assert_eq!(s.retry_waits[0].duration, 300);
        assert_eq!(s.retry_waits[0].retry_span_id.as_deref(), Some("a3"));
        assert_eq!(s.root_operation, "root");
    }

    #[test]
    fn parallel_attempts_overlap() {
        let t = trace(vec![
            span("root", None, 0, 1000, &[]),
            attempt("a1", "root", 10, 100, "200", "0"),
            attempt("a2", "root", 20, 100, "200", "1"),
            attempt("a3", "root", 30, 100, "200", "2"),
        ]);
        assert_eq!(summarize(&t).max_concurrent_attempts, 3);
    }
}
