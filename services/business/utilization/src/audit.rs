//! The antipattern lab's Synchronous I/O: every answer is recorded in an audit store,
//! modelled as a write that takes [`AUDIT_WRITE_TIME`]. Written `blocking`, it is a
//! synchronous call inside the async handler: it holds one of the runtime's few worker
//! threads, so other requests wait to be polled, latency grows with concurrency and the
//! CPU stays idle. Written `async`, the same write is awaited and the workers serve
//! other requests meanwhile. Both run under the same client span: the traces of the bad
//! and the fixed stage have the same shape, and only the request's poll times (the
//! server span's slow-poll figure) tell them apart.

use std::time::Duration;

use dronelab_contract::lab::AuditWrite;
use dronelab_contract::telemetry::span;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::Context;
use service_kit::Telemetry;

/// How long the modelled audit store takes to acknowledge a write.
pub const AUDIT_WRITE_TIME: Duration = Duration::from_millis(20);

pub async fn write(mode: AuditWrite, telemetry: &Telemetry, parent: &Context) {
    if mode == AuditWrite::Off {
        return;
    }
    let tracer = telemetry.tracer();
    let span = tracer
        .span_builder(span::AUDIT_WRITE)
        .with_kind(SpanKind::Client)
        .start_with_context(tracer, parent);
    let cx = parent.with_span(span);
    match mode {
        // The antipattern itself, on purpose: a blocking call on an async worker.
        AuditWrite::Blocking => std::thread::sleep(AUDIT_WRITE_TIME),
        AuditWrite::Async | AuditWrite::Off => tokio::time::sleep(AUDIT_WRITE_TIME).await,
    }
    cx.span().end();
}
