//! Which entry traces failed, and the call that failed in them: the first failed call
//! below the entry, followed down its failed children to where the failure began.

use std::collections::BTreeMap;

use dronelab_contract::telemetry::attribute::{
    DB_RESPONSE_STATUS_CODE, ERROR_TYPE, HTTP_RESPONSE_STATUS_CODE, INVOICE_PARTIAL,
    OTEL_STATUS_DESCRIPTION,
};

use crate::evidence::{FailingCall, FailureEvidence};
use crate::jaeger::{Span, Trace};
use crate::summary::is_error;

/// A status description is cut to this many characters in a finding.
const CAUSE_CHARS: usize = 80;

/// The failure evidence of answered entry traces (any status).
pub fn failure_evidence(traces: &[&Trace]) -> FailureEvidence {
    let mut by_call: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let mut failed = 0;
    for trace in traces {
        let Some(root) = trace.root().filter(|r| entry_failed(r)) else {
            continue;
        };
        failed += 1;
        let call = first_failed_call(trace, root);
        let origin = deepest_failure(trace, call);
        *by_call
            .entry((
                describe(trace, call),
                describe(trace, origin),
                cause(origin),
            ))
            .or_default() += 1;
    }
    // The most common; among equals, the first by name (stable across runs).
    let failing_call = by_call
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map(|((call, origin, cause), traces)| FailingCall {
            call,
            origin,
            cause,
            traces,
        });
    FailureEvidence {
        answered: traces.len(),
        failed,
        failing_call,
    }
}

/// The entry answered with an error status, or with a part of its answer missing.
fn entry_failed(root: &Span) -> bool {
    let status = root
        .tag_text(HTTP_RESPONSE_STATUS_CODE)
        .and_then(|s| s.parse::<u16>().ok());
    status.is_some_and(|s| !(200..300).contains(&s))
        || root.tag(INVOICE_PARTIAL) == Some(&serde_json::Value::Bool(true))
}

/// A span's children, earliest first.
fn children<'a>(trace: &'a Trace, parent: &'a Span) -> impl Iterator<Item = &'a Span> {
    let mut found: Vec<&Span> = trace
        .spans
        .iter()
        .filter(|s| s.parent_id() == Some(parent.span_id.as_str()))
        .collect();
    found.sort_by_key(|s| s.start_time);
    found.into_iter()
}

/// The failed span nearest the root (breadth first, earliest first at each depth); the
/// root itself when nothing below it failed (a request shed at the entry).
fn first_failed_call<'a>(trace: &'a Trace, root: &'a Span) -> &'a Span {
    let mut level = vec![root];
    while !level.is_empty() {
        let next: Vec<&Span> = level.iter().flat_map(|s| children(trace, s)).collect();
        if let Some(failed) = next.iter().find(|s| is_error(s)) {
            return failed;
        }
        level = next;
    }
    root
}

/// From `span`, the first failed child, repeatedly, while there is one.
fn deepest_failure<'a>(trace: &'a Trace, mut span: &'a Span) -> &'a Span {
    while let Some(child) = children(trace, span).find(|s| is_error(s)) {
        span = child;
    }
    span
}

/// `gateway GET deliveries (HTTP 503)`.
fn describe(trace: &Trace, span: &Span) -> String {
    format!(
        "{} {} ({})",
        trace.service_of(span),
        span.operation_name,
        cause(span)
    )
}

/// Why a span failed, from its status code, its error type or its status description.
fn cause(span: &Span) -> String {
    if let Some(code) = span.tag_text(DB_RESPONSE_STATUS_CODE) {
        return format!("Cosmos {code}");
    }
    if let Some(code) = span.tag_text(HTTP_RESPONSE_STATUS_CODE) {
        if span.tag(INVOICE_PARTIAL) == Some(&serde_json::Value::Bool(true)) {
            return format!("HTTP {code}, partial");
        }
        return format!("HTTP {code}");
    }
    if let Some(kind) = span.tag_text(ERROR_TYPE) {
        return kind;
    }
    match span.tag_text(OTEL_STATUS_DESCRIPTION) {
        Some(text) if text.chars().count() > CAUSE_CHARS => {
            let cut: String = text.chars().take(CAUSE_CHARS).collect();
            format!("{cut}…")
        }
        Some(text) => text,
        None => "error".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jaeger::Process;
    use dronelab_contract::telemetry::attribute::ERROR;

    fn span(
        id: &str,
        parent: Option<&str>,
        start: u64,
        process: &str,
        tags: &[(&str, serde_json::Value)],
    ) -> Span {
        crate::jaeger::testing::span(id, parent, (start, 10), process, tags)
    }

    fn trace(spans: Vec<Span>) -> Trace {
        let process = |name: &str| Process {
            service_name: name.into(),
            tags: vec![],
        };
        Trace {
            trace_id: "t".into(),
            spans,
            processes: [
                ("p1".to_owned(), process("gateway")),
                ("p2".to_owned(), process("delivery-service")),
            ]
            .into(),
            warnings: None,
        }
    }

    fn text(v: &str) -> serde_json::Value {
        serde_json::Value::String(v.into())
    }

    /// An invoice whose deliveries call was answered 503 twice by the delivery service
    /// (a retry), answered 200 without its deliveries.
    fn partial() -> Trace {
        let error = (ERROR, serde_json::Value::Bool(true));
        trace(vec![
            span(
                "GET /api/invoices",
                None,
                0,
                "p1",
                &[
                    (HTTP_RESPONSE_STATUS_CODE, text("200")),
                    (INVOICE_PARTIAL, serde_json::Value::Bool(true)),
                ],
            ),
            span(
                "GET packages",
                Some("GET /api/invoices"),
                1,
                "p1",
                &[(HTTP_RESPONSE_STATUS_CODE, text("200"))],
            ),
            span(
                "GET deliveries",
                Some("GET /api/invoices"),
                2,
                "p1",
                &[(HTTP_RESPONSE_STATUS_CODE, text("503")), error.clone()],
            ),
            span(
                "GET /api/deliveries",
                Some("GET deliveries"),
                3,
                "p2",
                &[(HTTP_RESPONSE_STATUS_CODE, text("503")), error.clone()],
            ),
        ])
    }

    fn ok() -> Trace {
        trace(vec![span(
            "GET /api/invoices",
            None,
            0,
            "p1",
            &[(HTTP_RESPONSE_STATUS_CODE, text("200"))],
        )])
    }

    fn shed() -> Trace {
        trace(vec![span(
            "GET /api/invoices",
            None,
            0,
            "p1",
            &[
                (HTTP_RESPONSE_STATUS_CODE, text("503")),
                (ERROR, serde_json::Value::Bool(true)),
            ],
        )])
    }

    #[test]
    fn names_the_first_failed_call_and_where_it_began() {
        let traces = [partial(), ok(), partial(), shed()];
        let refs: Vec<&Trace> = traces.iter().collect();
        let e = failure_evidence(&refs);
        assert_eq!((e.answered, e.failed), (4, 3));
        let call = e.failing_call.expect("a failing call");
        assert_eq!(call.call, "gateway GET deliveries (HTTP 503)");
        assert_eq!(
            call.origin,
            "delivery-service GET /api/deliveries (HTTP 503)"
        );
        assert_eq!(call.cause, "HTTP 503");
        assert_eq!(call.traces, 2);
    }

    #[test]
    fn a_request_shed_at_the_entry_is_its_own_failing_call() {
        let traces = [shed()];
        let refs: Vec<&Trace> = traces.iter().collect();
        let call = failure_evidence(&refs).failing_call.expect("shed");
        assert_eq!(call.call, "gateway GET /api/invoices (HTTP 503)");
        assert_eq!(call.origin, call.call);
    }

    #[test]
    fn answers_without_failures_name_no_call() {
        let traces = [ok(), ok()];
        let refs: Vec<&Trace> = traces.iter().collect();
        let e = failure_evidence(&refs);
        assert_eq!(e.failed_share(), 0.0);
        assert_eq!((e.answered, e.failed, e.failing_call), (2, 0, None));
    }
}
