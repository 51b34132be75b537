//! [`LeafSpan`]: a span no other span of the service is made a child of (a backend call's
//! client span, whose children are the backend's), recorded as the SDK's span data and
//! handed to the service's span processor when it ends, without the SDK's span: no
//! tracer, sampler or context around it.
//!
//! The SDK's way cost ~800 instructions a call more (callgrind, on the gateway, which
//! makes three a request): building the span through the tracer and its sampler, boxing
//! it behind a mutex in a new `Context`, every attribute and the end going through that
//! mutex and two virtual calls, and the end copying the span into its exported form. A
//! leaf span needs none of it: nothing looks it up in a context, and it is recorded only
//! where the SDK would record it too ([`LeafSpan::start`]). What the SDK would do besides
//! is not needed here: the processors' `on_start` does nothing, and a call's span has
//! six attributes, far from the span limits.

use std::sync::Arc;

use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceContextExt as _, TraceFlags};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use crate::span_batch::CountingBatchProcessor;

/// Where a service's leaf spans go: its span processor, the one its tracer provider
/// has, and the scope its tracer stamps on every span.
#[derive(Clone)]
pub(crate) struct LeafSpans {
    pub(crate) processor: SharedProcessor,
    pub(crate) scope: InstrumentationScope,
}

/// A span being recorded; it is handed to the processor at [`LeafSpan::end`], or when
/// dropped (a call abandoned midway ends there, as an SDK span does).
pub(crate) struct LeafSpan<'a> {
    /// Taken at the end.
    data: Option<Box<SpanData>>,
    spans: &'a LeafSpans,
}

impl<'a> LeafSpan<'a> {
    /// A span of `kind` named `name`, a child of `parent`'s span, when that span is
    /// recording: then every sampler the SDK offers samples the child too (a parent-based
    /// one follows the parent, the trace-id ratio one decides on the same trace id,
    /// always-on always does). Otherwise `attributes` are given back, for the SDK's
    /// tracer to decide (a root span, or a parent not sampled).
    pub(crate) fn start(
        spans: &'a LeafSpans,
        parent: &Context,
        name: &'static str,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
    ) -> Result<Self, Vec<KeyValue>> {
        let parent_span = parent.span();
        if !parent_span.is_recording() {
            return Err(attributes);
        }
        let parent_context = parent_span.span_context();
        let context = SpanContext::new(
            parent_context.trace_id(),
            RandomIdGenerator::default().new_span_id(),
            TraceFlags::SAMPLED,
            false,
            parent_context.trace_state().clone(),
        );
        let start_time = opentelemetry::time::now();
        let data = SpanData {
            span_context: context,
            parent_span_id: parent_context.span_id(),
            parent_span_is_remote: parent_context.is_remote(),
            span_kind: kind,
            name: name.into(),
            start_time,
            end_time: start_time,
            attributes,
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: spans.scope.clone(),
        };
        Ok(Self {
            data: Some(Box::new(data)),
            spans,
        })
    }

    /// The span's own context (the one a call carries in `traceparent`); always there
    /// until the span ends, which takes the span.
    pub(crate) fn span_context(&self) -> Option<&SpanContext> {
        self.data.as_ref().map(|data| &data.span_context)
    }

    /// Ends the span with `attribute` added and, if given, `status`.
    pub(crate) fn end(mut self, attribute: KeyValue, status: Option<Status>) {
        if let Some(data) = self.data.as_mut() {
            data.attributes.push(attribute);
            if let Some(status) = status {
                data.status = status;
            }
        }
        self.record();
    }

    fn record(&mut self) {
        if let Some(mut data) = self.data.take() {
            data.end_time = opentelemetry::time::now();
            self.spans.processor.on_end_boxed(data);
        }
    }
}

impl Drop for LeafSpan<'_> {
    fn drop(&mut self) {
        self.record();
    }
}

/// A service's span processor, shared by its tracer provider (which takes a processor
/// by value) and its leaf spans. Its resource is set before it is shared, as the provider
/// would set it.
#[derive(Debug, Clone)]
pub(crate) enum SharedProcessor {
    /// The batching processor, which queues a leaf span's box as it is: handed over by
    /// value, the span was copied out of its box and into a new one (~100 instructions).
    Batch(Arc<CountingBatchProcessor>),
    Other(Arc<dyn SpanProcessor>),
}

impl SharedProcessor {
    pub(crate) fn batch(mut processor: CountingBatchProcessor, resource: &Resource) -> Self {
        processor.set_resource(resource);
        Self::Batch(Arc::new(processor))
    }

    pub(crate) fn other(mut processor: impl SpanProcessor + 'static, resource: &Resource) -> Self {
        processor.set_resource(resource);
        Self::Other(Arc::new(processor))
    }

    fn on_end_boxed(&self, span: Box<SpanData>) {
        match self {
            Self::Batch(batch) => batch.queue(span),
            Self::Other(processor) => processor.on_end(*span),
        }
    }

    fn processor(&self) -> &dyn SpanProcessor {
        match self {
            Self::Batch(batch) => batch.as_ref(),
            Self::Other(processor) => processor.as_ref(),
        }
    }
}

impl SpanProcessor for SharedProcessor {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.processor().on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.processor().on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.processor().force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.processor().shutdown_with_timeout(timeout)
    }
}
