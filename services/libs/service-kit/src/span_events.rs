//! Log lines as span events: an event logged inside a request joins the request's
//! OpenTelemetry server span as a span event, named by its message, with its level and
//! its other fields as attributes. The server span itself is made through the
//! OpenTelemetry API (a bridged `tracing` span cost the gateway about a tenth of its
//! instructions per request); the request's `tracing` span, made only when something is
//! logged ([`crate::request_scope`]), carries the ids every log line shows and the
//! OpenTelemetry context it stands for ([`RequestSpanContext`]).

use std::fmt;

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::KeyValue;
use tracing::field::{Field, Visit};
use tracing::Subscriber;
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::request_scope::RequestSpanContext;

/// The layer that adds events to the OpenTelemetry span of the nearest enclosing request
/// span; events outside any request are left to the log lines.
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
            let extensions = span.extensions();
            let Some(RequestSpanContext(cx)) = extensions.get::<RequestSpanContext>() else {
                continue;
            };
            let metadata = event.metadata();
            let mut fields = EventFields {
                message: None,
                attributes: vec![KeyValue::new("level", metadata.level().as_str())],
            };
            event.record(&mut fields);
            let name = fields.message.unwrap_or_else(|| metadata.name().to_owned());
            cx.span().add_event(name, fields.attributes);
            return;
        }
    }
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
    use crate::request_scope::{in_request, RequestRegistry};
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry::Context;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt as _;

    #[tokio::test]
    async fn events_inside_a_request_join_its_opentelemetry_span_and_others_do_not() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let tracer = provider.tracer("test");
        let dispatch = tracing::Dispatch::new(RequestRegistry::default().with(SpanEvents));
        let _default = tracing::dispatcher::set_default(&dispatch);
        tracing::info!("outside any request");
        let cx = Context::new().with_span(tracer.start("server"));
        in_request(cx.clone(), dispatch.clone(), async {
            tracing::warn!(status = 503_u16, retried = true, error = %"boom", "answered");
            tracing::info_span!("inner").in_scope(|| tracing::info!(big = u64::MAX, "deep"));
        })
        .await;
        tracing::info_span!("unattached").in_scope(|| tracing::info!("not joined"));
        cx.span().end();
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
