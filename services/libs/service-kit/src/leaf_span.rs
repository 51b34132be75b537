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

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, SamplingDecision, SamplingResult, ShouldSample, SpanData,
    SpanLimits, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use crate::span_batch::CountingBatchProcessor;

/// Where a service's leaf spans go: its span processor, the one its tracer provider
/// has, and the scope its tracer stamps on every span; and what its tracer decides a
/// new span by, for the spans started as [`ContextSpan`]s.
#[derive(Clone)]
pub(crate) struct LeafSpans {
    pub(crate) processor: SharedProcessor,
    pub(crate) scope: InstrumentationScope,
    pub(crate) sampler: SharedSampler,
    pub(crate) limits: SpanLimits,
}

/// The sampler a service's tracer provider was built with, shared with its
/// [`ContextSpan`]s, which must decide as the tracer would.
#[derive(Debug, Clone)]
pub(crate) struct SharedSampler(pub(crate) Arc<dyn ShouldSample>);

impl ShouldSample for SharedSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        self.0
            .should_sample(parent_context, trace_id, name, span_kind, attributes, links)
    }
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
        let data = spans.span_data(context, Some(parent_context), name, kind, attributes, 0);
        Ok(Self {
            data: Some(data),
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

/// A span the service records itself, as a [`LeafSpan`] is, that can be a context's
/// current span: a request's server span, which its calls' spans and anything else the
/// request starts are children of. It is started as the SDK's tracer starts a span (the
/// same sampler, limits, ids and flags) and handed to the same processor when it ends,
/// without the tracer's own span: started and ended through the tracer, a request's
/// server span cost ~530 instructions more (callgrind, on the gateway): the tracer built
/// the span's data at its start and again, for the processor, at its end.
pub(crate) struct ContextSpan {
    context: SpanContext,
    /// Recorded until the end, which takes it; never, for a span the sampler dropped.
    data: Option<Box<SpanData>>,
    processor: SharedProcessor,
    limits: SpanLimits,
}

impl LeafSpans {
    /// A span of `kind` named `name`, a child of `parent`'s span if that is valid (else a
    /// root), recording or not as the sampler decides; `None` where the SDK's tracer would
    /// make no span at all (telemetry suppressed in `parent`).
    pub(crate) fn start_context_span(
        &self,
        parent: &Context,
        name: &'static str,
        kind: SpanKind,
        mut attributes: Vec<KeyValue>,
    ) -> Option<ContextSpan> {
        if parent.is_telemetry_suppressed() {
            return None;
        }
        let ids = RandomIdGenerator::default();
        let span_id = ids.new_span_id();
        let parent_span = parent.span();
        let parent_context = Some(parent_span.span_context()).filter(|c| c.is_valid());
        let trace_id = parent_context.map_or_else(|| ids.new_trace_id(), |c| c.trace_id());
        let sampled =
            self.sampler
                .should_sample(Some(parent), trace_id, name, &kind, &attributes, &[]);
        let flags = parent_context.map_or(TraceFlags::default(), |c| c.trace_flags());
        let flags = match sampled.decision {
            SamplingDecision::RecordAndSample => flags.with_sampled(true),
            SamplingDecision::RecordOnly => flags.with_sampled(false),
            SamplingDecision::Drop => TraceFlags::default(),
        };
        let context = SpanContext::new(trace_id, span_id, flags, false, sampled.trace_state);
        let data = (sampled.decision != SamplingDecision::Drop).then(|| {
            attributes.extend(sampled.attributes);
            let dropped = keep_within(&mut attributes, self.limits.max_attributes_per_span);
            let context = context.clone();
            self.span_data(context, parent_context, name, kind, attributes, dropped)
        });
        Some(ContextSpan {
            context,
            data,
            processor: self.processor.clone(),
            limits: self.limits,
        })
    }

    /// The data of a span of `context` starting now, a child of `parent` (`None` for a
    /// root), in this service's scope.
    fn span_data(
        &self,
        context: SpanContext,
        parent: Option<&SpanContext>,
        name: &'static str,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
        dropped_attributes_count: u32,
    ) -> Box<SpanData> {
        let start_time = opentelemetry::time::now();
        Box::new(SpanData {
            span_context: context,
            parent_span_id: parent.map_or(SpanId::INVALID, SpanContext::span_id),
            parent_span_is_remote: parent.is_some_and(SpanContext::is_remote),
            span_kind: kind,
            name: name.into(),
            start_time,
            end_time: start_time,
            attributes,
            dropped_attributes_count,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: self.scope.clone(),
        })
    }
}

/// Keeps the first `limit` of `attributes`, as the SDK's span limits do; how many it
/// dropped.
fn keep_within(attributes: &mut Vec<KeyValue>, limit: u32) -> u32 {
    let dropped = attributes.len().saturating_sub(limit as usize);
    attributes.truncate(limit as usize);
    dropped as u32
}

impl opentelemetry::trace::Span for ContextSpan {
    fn add_event_with_timestamp<T>(
        &mut self,
        name: T,
        timestamp: SystemTime,
        mut attributes: Vec<KeyValue>,
    ) where
        T: Into<Cow<'static, str>>,
    {
        let Some(data) = self.data.as_mut() else {
            return;
        };
        if data.events.len() < self.limits.max_events_per_span as usize {
            let dropped = keep_within(&mut attributes, self.limits.max_attributes_per_event);
            let event = Event::new(name, timestamp, attributes, dropped);
            data.events.events.push(event);
        } else {
            data.events.dropped_count += 1;
        }
    }

    fn span_context(&self) -> &SpanContext {
        &self.context
    }

    fn is_recording(&self) -> bool {
        self.data.is_some()
    }

    fn set_attribute(&mut self, attribute: KeyValue) {
        let Some(data) = self.data.as_mut() else {
            return;
        };
        if data.attributes.len() < self.limits.max_attributes_per_span as usize {
            data.attributes.push(attribute);
        } else {
            data.dropped_attributes_count += 1;
        }
    }

    /// As the SDK's span: a status only replaces a lesser one (Ok > Error > Unset).
    fn set_status(&mut self, status: Status) {
        if let Some(data) = self.data.as_mut() {
            if status > data.status {
                data.status = status;
            }
        }
    }

    fn update_name<T>(&mut self, new_name: T)
    where
        T: Into<Cow<'static, str>>,
    {
        if let Some(data) = self.data.as_mut() {
            data.name = new_name.into();
        }
    }

    fn add_link(&mut self, span_context: SpanContext, mut attributes: Vec<KeyValue>) {
        let Some(data) = self.data.as_mut() else {
            return;
        };
        if data.links.links.len() < self.limits.max_links_per_span as usize {
            let dropped = keep_within(&mut attributes, self.limits.max_attributes_per_link);
            let link = Link::new(span_context, attributes, dropped);
            data.links.links.push(link);
        } else {
            data.links.dropped_count += 1;
        }
    }

    fn end_with_timestamp(&mut self, timestamp: SystemTime) {
        if let Some(mut data) = self.data.take() {
            data.end_time = timestamp;
            self.processor.on_end_boxed(data);
        }
    }
}

/// A span dropped before its end ends there, as the SDK's does.
impl Drop for ContextSpan {
    fn drop(&mut self) {
        opentelemetry::trace::Span::end(self);
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

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{Span as _, SpanId, TraceState, Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{
        InMemorySpanExporter, Sampler, SdkTracerProvider, SimpleSpanProcessor,
    };

    use super::*;

    /// Limits low enough for every one of them to be reached.
    fn limits() -> SpanLimits {
        SpanLimits {
            max_attributes_per_span: 3,
            max_events_per_span: 2,
            max_attributes_per_event: 1,
            max_links_per_span: 1,
            max_attributes_per_link: 1,
        }
    }

    fn spans(exporter: &InMemorySpanExporter, sampler: Sampler) -> LeafSpans {
        let resource = Resource::builder_empty().with_service_name("svc").build();
        LeafSpans {
            processor: SharedProcessor::other(
                SimpleSpanProcessor::new(exporter.clone()),
                &resource,
            ),
            scope: InstrumentationScope::builder("svc").build(),
            sampler: SharedSampler(Arc::new(sampler)),
            limits: limits(),
        }
    }

    fn remote_parent(sampled: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c_u128),
            SpanId::from(0x00f0_67aa_0ba9_02b7),
            flags,
            true,
            TraceState::from_key_value([("k", "v")]).expect("state"),
        ))
    }

    /// Everything a request does to its server span, past every limit.
    fn record(span: &mut impl opentelemetry::trace::Span) {
        span.set_attribute(KeyValue::new("c", 3));
        span.set_attribute(KeyValue::new("d", 4));
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let two = vec![KeyValue::new("x", 1), KeyValue::new("y", 2)];
        span.add_event_with_timestamp("first", at, two.clone());
        span.add_event_with_timestamp("second", at, Vec::new());
        span.add_event_with_timestamp("third", at, Vec::new());
        span.set_status(Status::error("failed"));
        span.set_status(Status::Ok);
        span.set_status(Status::error("later"));
        span.update_name("renamed");
        let linked = remote_parent(true).span().span_context().clone();
        span.add_link(linked.clone(), two);
        span.add_link(linked, Vec::new());
        span.end();
    }

    /// The same span through the SDK's tracer and as a [`ContextSpan`]: all but its own
    /// id and times agree.
    #[test]
    fn a_context_span_records_what_the_sdks_span_records() {
        let parent = remote_parent(true);
        let attributes = vec![KeyValue::new("a", 1), KeyValue::new("b", 2)];

        let theirs = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(theirs.clone())
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_span_limits(limits())
            .build();
        let tracer = provider.tracer_with_scope(InstrumentationScope::builder("svc").build());
        let mut span = tracer
            .span_builder("GET /x")
            .with_kind(SpanKind::Server)
            .with_attributes(attributes.clone())
            .start_with_context(&tracer, &parent);
        record(&mut span);

        let ours = InMemorySpanExporter::default();
        let spans = spans(&ours, Sampler::ParentBased(Box::new(Sampler::AlwaysOn)));
        let mut span = spans
            .start_context_span(&parent, "GET /x", SpanKind::Server, attributes)
            .expect("a span");
        assert!(span.is_recording());
        record(&mut span);

        let finished = |exporter: &InMemorySpanExporter| {
            let [span] = <[SpanData; 1]>::try_from(exporter.get_finished_spans().expect("spans"))
                .expect("one span");
            span
        };
        let (theirs, ours) = (finished(&theirs), finished(&ours));
        let comparable = |s: &SpanData| {
            format!(
                "{:?} {:?} {:?} {} {:?} {:?} {:?} {} {:?} {:?} {:?} {:?}",
                s.span_context.trace_id(),
                s.span_context.trace_flags(),
                s.span_context.trace_state().header(),
                s.span_context.is_remote(),
                s.parent_span_id,
                s.parent_span_is_remote,
                s.name,
                s.dropped_attributes_count,
                s.attributes,
                s.events,
                s.links,
                (&s.status, &s.span_kind, s.instrumentation_scope.name()),
            )
        };
        assert_eq!(comparable(&ours), comparable(&theirs));
        assert!(ours.end_time >= ours.start_time);
        assert_ne!(ours.span_context.span_id(), SpanId::INVALID);
    }

    #[test]
    fn the_sampler_decides_as_for_the_tracer() {
        let exporter = InMemorySpanExporter::default();
        let parent_based = spans(&exporter, Sampler::ParentBased(Box::new(Sampler::AlwaysOn)));

        // A root: a trace of its own, sampled.
        let root = parent_based
            .start_context_span(&Context::new(), "root", SpanKind::Server, Vec::new())
            .expect("a span");
        assert!(root.is_recording());
        assert!(root.span_context().is_sampled());
        drop(root);
        let [root] = <[SpanData; 1]>::try_from(exporter.get_finished_spans().expect("spans"))
            .expect("ended when dropped");
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        assert!(root.span_context.is_valid());

        // A caller that did not sample: neither does the span, which keeps its trace.
        let unsampled = remote_parent(false);
        let mut span = parent_based
            .start_context_span(&unsampled, "child", SpanKind::Server, Vec::new())
            .expect("a span");
        assert!(!span.is_recording());
        assert!(!span.span_context().is_sampled());
        assert_eq!(
            span.span_context().trace_id(),
            unsampled.span().span_context().trace_id()
        );
        span.set_attribute(KeyValue::new("ignored", true));
        span.end();

        let off = spans(&exporter, Sampler::AlwaysOff);
        let span = off
            .start_context_span(&remote_parent(true), "off", SpanKind::Server, Vec::new())
            .expect("a span");
        assert!(!span.is_recording());
        drop(span);
        assert_eq!(exporter.get_finished_spans().expect("spans").len(), 1);

        let suppressed = remote_parent(true).with_telemetry_suppressed();
        assert!(parent_based
            .start_context_span(&suppressed, "quiet", SpanKind::Server, Vec::new())
            .is_none());
    }
}
