//! The fault the antipattern lab's Retry Storm runs against (`DELIVERY_OVERLOAD=on`):
//! delivery-service as a saturated backend with a bounded queue. It serves
//! [`OVERLOAD_SLOTS`] requests at a time, each holding its slot for [`OVERLOAD_WORK`] of
//! modelled work, and refuses (503, `Retry-After`) a request that waited
//! [`OVERLOAD_QUEUE_WAIT`] in line. Every retry joins the same line, so retries made at
//! once, without a budget, lengthen it for everyone. Both waits are spans of their own
//! (`wait for capacity`, `work`): the time is explained, as an instrumented queue would
//! show it.

use dronelab_contract::lab::{OVERLOAD_QUEUE_WAIT, OVERLOAD_SLOTS, OVERLOAD_WORK};
use dronelab_contract::telemetry::span;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::Context;
use service_kit::Telemetry;
use tokio::sync::Semaphore;

use cosmos_kit::BackendError;

pub struct Capacity {
    slots: Semaphore,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            slots: Semaphore::new(OVERLOAD_SLOTS),
        }
    }
}

impl Capacity {
    /// Waits in line for a slot (at most [`OVERLOAD_QUEUE_WAIT`]), then does the work;
    /// `Overloaded` when no slot came in time.
    pub async fn serve(&self, telemetry: &Telemetry, parent: &Context) -> Result<(), BackendError> {
        let tracer = telemetry.tracer();
        let start = |name: &'static str| {
            let span = tracer
                .span_builder(name)
                .with_kind(SpanKind::Internal)
                .start_with_context(tracer, parent);
            parent.with_span(span)
        };
        let queued = start(span::OVERLOAD_QUEUE);
        let slot = tokio::time::timeout(OVERLOAD_QUEUE_WAIT, self.slots.acquire()).await;
        let Ok(Ok(_slot)) = slot else {
            queued
                .span()
                .set_status(Status::error("no capacity within the queue wait"));
            queued.span().end();
            return Err(BackendError::Overloaded);
        };
        queued.span().end();
        let work = start(span::OVERLOAD_WORK);
        tokio::time::sleep(OVERLOAD_WORK).await;
        work.span().end();
        Ok(())
    }
}
