//! The antipattern lab's Synchronous I/O: every answer is recorded in an audit store,
//! modelled as a write that takes [`AUDIT_WRITE_TIME`]. Written `blocking`, it is a
//! synchronous call inside the async handler: it holds one of the runtime's few worker
//! threads, so other requests wait to be polled, latency grows with concurrency and the
//! CPU stays idle; no span covers it, as none covers an uninstrumented synchronous
//! client. Written `async`, the same write is awaited under a client span of its own
//! and the workers serve other requests meanwhile.

use std::time::Duration;

use dronelab_contract::lab::AuditWrite;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::Context;
use service_kit::Telemetry;

/// How long the modelled audit store takes to acknowledge a write.
pub const AUDIT_WRITE_TIME: Duration = Duration::from_millis(20);

/// The span name of an awaited audit write.
pub const AUDIT_WRITE_SPAN: &str = "audit write";

pub async fn write(mode: AuditWrite, telemetry: &Telemetry, parent: &Context) {
    match mode {
        AuditWrite::Off => {}
        // The antipattern itself, on purpose: a blocking call on an async worker.
        AuditWrite::Blocking => std::thread::sleep(AUDIT_WRITE_TIME),
        AuditWrite::Async => {
            let tracer = telemetry.tracer();
            let span = tracer
                .span_builder(AUDIT_WRITE_SPAN)
                .with_kind(SpanKind::Client)
                .start_with_context(tracer, parent);
            let cx = parent.with_span(span);
            tokio::time::sleep(AUDIT_WRITE_TIME).await;
            cx.span().end();
        }
    }
}
