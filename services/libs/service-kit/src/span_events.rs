//! Log lines as span events: an event logged inside a request joins the request's
//! OpenTelemetry server span as a span event, named by its message, with its level and
//! its other fields as attributes. The server span itself is made through the
//! OpenTelemetry API (a bridged `tracing` span cost the gateway about a tenth of its
//! instructions per request); the request's `tracing` span only carries the ids every log
//! line shows, and the OpenTelemetry context it stands for ([`attach`]).
//!
//! The ids are recorded on the request span at its first event, not when it is made: the
//! log layer formats a span's fields as they are recorded, ~3k instructions for the two
//! ids, and most requests log nothing.

use std::fmt;

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context, KeyValue};
use tracing::field::{Field, Visit};
use tracing::Subscriber;
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::{LookupSpan, SpanRef};
use tracing_subscriber::Layer;

use crate::traceparent::W3cTraceparent;

/// The `tracing` span every request is served in ([`request_span`]): its target, which
/// nothing else logs to (the filter lets it through by this target), and its name.
pub(crate) const REQUEST_SPAN_TARGET: &str = "dronelab_request";
const REQUEST_SPAN: &str = "request";

/// The fields of a request's `tracing` span ([`request_span`]), made empty and recorded
/// at its first event.
const TRACE_ID: &str = "trace_id";
const SPAN_ID: &str = "span_id";

/// The `tracing` span a traced request is served in, for its log lines: they show its
/// trace and span id, and join its server span as events ([`attach`]). Made in the
/// current dispatch, the service's.
pub(crate) fn request_span() -> tracing::Span {
    tracing::info_span!(
        target: REQUEST_SPAN_TARGET,
        REQUEST_SPAN,
        // The names of TRACE_ID and SPAN_ID (a span's fields are named in the macro).
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    )
}

/// What a request's `tracing` span stands for, kept in the span's extensions: the
/// OpenTelemetry context its events join, and its ids until an event records them
/// through the span's dispatch (inside an event, `tracing` offers no other).
struct RequestSpan {
    cx: Context,
    ids: Option<(W3cTraceparent, tracing::Dispatch)>,
}

/// Makes the events logged inside `span` (or a span within it) join `cx`'s span, and
/// the first of them record `ids` in `span`'s fields [`TRACE_ID`] and [`SPAN_ID`].
pub(crate) fn attach(span: &tracing::Span, cx: Context, ids: W3cTraceparent) {
    span.with_subscriber(|(id, dispatch)| {
        let span = dispatch
            .downcast_ref::<tracing_subscriber::Registry>()
            .and_then(|registry| registry.span(id));
        if let Some(span) = span {
            let ids = Some((ids, dispatch.clone()));
            span.extensions_mut().insert(RequestSpan { cx, ids });
        }
    });
}

/// The layer that adds events to the OpenTelemetry span [`attach`]ed to the nearest
/// enclosing `tracing` span, and records that span's ids at its first event; events
/// outside any such span are left to the log lines. It must see an event before the log
/// layer does, which then prints the ids.
pub(crate) struct SpanEvents;

impl<S> Layer<S> for SpanEvents
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        for span in scope {
            let mut extensions = span.extensions_mut();
            let Some(request) = extensions.get_mut::<RequestSpan>() else {
                continue;
            };
            let ids = request.ids.take();
            let metadata = event.metadata();
            let mut fields = EventFields {
                message: None,
                attributes: vec![KeyValue::new("level", metadata.level().as_str())],
            };
            event.record(&mut fields);
            let name = fields.message.unwrap_or_else(|| metadata.name().to_owned());
            request.cx.span().add_event(name, fields.attributes);
            // Recording reaches the log layer, which takes the extensions itself.
            drop(extensions);
            if let Some((ids, dispatch)) = ids {
                record_ids(&span, &ids, &dispatch);
            }
            return;
        }
    }
}

/// Records `ids` in `span`'s fields through `dispatch`, the span's, so that every layer
/// (the log layer's formatted fields) sees them.
fn record_ids<S>(span: &SpanRef<'_, S>, ids: &W3cTraceparent, dispatch: &tracing::Dispatch)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let fields = span.metadata().fields();
    let (Some(trace_field), Some(span_field)) = (fields.field(TRACE_ID), fields.field(SPAN_ID))
    else {
        return;
    };
    let (trace_id, span_id) = (
        tracing::field::display(ids.trace_id()),
        tracing::field::display(ids.span_id()),
    );
    let values: [(&Field, Option<&dyn tracing::Value>); 2] = [
        (&trace_field, Some(&trace_id)),
        (&span_field, Some(&span_id)),
    ];
    let values = fields.value_set(&values);
    dispatch.record(&span.id(), &tracing::span::Record::new(&values));
}

/// An event's message and its other fields as attributes.
struct EventFields {
    message: Option<String>,
    attributes: Vec<KeyValue>,
}

impl EventFields {
    fn add(&mut self, field: &Field, value: impl Into<opentelemetry::Value>) {
        self.attributes.push(KeyValue::new(field.name(), value));
    }
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_owned());
        } else {
            self.add(field, value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(text);
        } else {
            self.add(field, text);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.add(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(value) => self.add(field, value),
            Err(_) => self.add(field, value.to_string()),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.add(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.add(field, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn events_inside_an_attached_span_join_its_opentelemetry_span_and_others_do_not() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let tracer = provider.tracer("test");
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(SpanEvents));
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!("outside any span");
            let request = tracing::info_span!("request");
            let cx = Context::new().with_span(tracer.start("server"));
            let ids = W3cTraceparent::of(cx.span().span_context());
            attach(&request, cx.clone(), ids);
            request.in_scope(|| {
                tracing::warn!(status = 503_u16, retried = true, error = %"boom", "answered");
                tracing::info_span!("inner").in_scope(|| tracing::info!(big = u64::MAX, "deep"));
            });
            tracing::info_span!("unattached").in_scope(|| tracing::info!("not joined"));
            cx.span().end();
        });
        let spans = exporter.get_finished_spans().expect("spans");
        assert_eq!(spans.len(), 1);
        let events: Vec<_> = spans[0].events.iter().collect();
        let names: Vec<&str> = events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(names, ["answered", "deep"]);
        let attribute = |event: usize, key: &str| {
            events[event]
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(attribute(0, "level"), Some("WARN".into()));
        assert_eq!(attribute(0, "status"), Some(503_i64.into()));
        assert_eq!(attribute(0, "retried"), Some(true.into()));
        assert_eq!(attribute(0, "error"), Some("boom".to_owned().into()));
        assert_eq!(attribute(1, "big"), Some(u64::MAX.to_string().into()));
        assert_eq!(attribute(0, "message"), None, "the message is the name");
    }
}
