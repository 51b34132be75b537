//! The traced request a task is serving, and its `tracing` span made only when something
//! needs it.
//!
//! Every log line inside a traced request shows the request's trace and span id, as the
//! fields of a `tracing` span named `request` that encloses it. Most requests log
//! nothing, and making that span for each, entering and leaving it at every poll and
//! closing it, cost the traced gateway ~2,700 instructions an invoice (callgrind) and
//! 4–7 % of its throughput (alternating rounds in `bench/run tracing`'s placement:
//! 16.7k–17.9k invoices/s made lazily, 15.5k–16.8k made always). So a request is
//! served inside a [`RequestScope`] (a Tokio task-local, [`in_request`]), and
//! [`RequestRegistry`] makes the span the first time something inside asks for the
//! current span: an event to log (the log layer looks up its enclosing spans), a span
//! made without an explicit parent, which becomes the request span's child, or
//! `Span::current()`. What is logged reads as it would had the span been entered all
//! along; a span made inside the request and entered is current as usual. One edge
//! differs: a span entered around the request from outside (a task instrumented with a
//! span of its own) is the current span inside it, so the request span is not made and
//! log lines show that span alone. The servers here run each request in its
//! connection's task, with no span around it.

use std::cell::{Cell, OnceCell};
use std::future::Future;

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_core::callsite::DefaultCallsite;
use tracing_core::field::{Field, FieldSet};
use tracing_core::metadata::Kind;
use tracing_core::span::Current;
use tracing_core::Level;
use tracing_subscriber::filter::FilterId;
use tracing_subscriber::registry::{LookupSpan, Registry};

use crate::traceparent::W3cTraceparent;

/// The request span's target and name, and its two fields.
const REQUEST_SPAN_TARGET: &str = "dronelab_request";
const REQUEST_SPAN: &str = "request";
const TRACE_ID: &str = "trace_id";
const SPAN_ID: &str = "span_id";

static REQUEST_CALLSITE: DefaultCallsite = DefaultCallsite::new(&REQUEST_METADATA);
static REQUEST_METADATA: Metadata<'static> = Metadata::new(
    REQUEST_SPAN,
    REQUEST_SPAN_TARGET,
    Level::INFO,
    Some(file!()),
    Some(line!()),
    Some(module_path!()),
    FieldSet::new(
        &[TRACE_ID, SPAN_ID],
        tracing_core::identify_callsite!(&REQUEST_CALLSITE),
    ),
    Kind::SPAN,
);

tokio::task_local! {
    static REQUEST: RequestScope;
}

/// A traced request being served: its OpenTelemetry context, the dispatch it is served
/// under, and its `tracing` span once one is made. The span closes when the request's
/// future is done or dropped. Small, as it is moved in and out of its task-local slot at
/// every poll: the ids are written out only for a span.
pub(crate) struct RequestScope {
    cx: Context,
    dispatch: Dispatch,
    span: OnceCell<Id>,
    /// While the span is being made: a layer asking for the current span then is told
    /// there is none, rather than making another.
    making: Cell<bool>,
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        if let Some(span) = self.span.take() {
            self.dispatch.try_close(span);
        }
    }
}

/// Runs `serve` as the request whose server span is `cx`'s, under `dispatch` (the
/// service's, whose registry is a [`RequestRegistry`]).
pub(crate) fn in_request<F: Future>(
    cx: Context,
    dispatch: Dispatch,
    serve: F,
) -> impl Future<Output = F::Output> {
    let scope = RequestScope {
        cx,
        dispatch,
        span: OnceCell::new(),
        making: Cell::new(false),
    };
    REQUEST.scope(scope, serve)
}

/// What a request span stands for, kept in its extensions: the OpenTelemetry context
/// (the server span) that the events logged inside it join.
pub(crate) struct RequestSpanContext(pub(crate) Context);

/// `tracing`'s span registry, which makes the request span of the task's
/// [`RequestScope`] when the current span is asked for and none is entered. It is the
/// base of a service's dispatch, under its layers.
pub(crate) struct RequestRegistry {
    registry: Registry,
}

impl Default for RequestRegistry {
    fn default() -> Self {
        // Known to every dispatch, as a macro's callsite is at its first use.
        REQUEST_CALLSITE.register();
        Self {
            registry: Registry::default(),
        }
    }
}

impl RequestRegistry {
    /// The request span of the task's request served under this registry's dispatch,
    /// made now if it was not yet.
    fn request_span(&self) -> Option<Id> {
        REQUEST
            .try_with(|request| {
                // Another dispatch's request (one service's task logging through another
                // dispatch): its span ids mean nothing here.
                let ours = request.dispatch.downcast_ref::<Self>();
                if !ours.is_some_and(|ours| std::ptr::eq(ours, self)) {
                    return None;
                }
                if let Some(span) = request.span.get() {
                    return Some(span.clone());
                }
                if request.making.replace(true) {
                    return None;
                }
                let made = self.make_request_span(request);
                request.making.set(false);
                let made = made?;
                Some(request.span.get_or_init(|| made).clone())
            })
            .ok()
            .flatten()
    }

    /// Makes `request`'s span, with its ids, through the whole dispatch, so every layer
    /// sees it (the log layer formats its fields), and as a root, so that this is not
    /// asked again; and records the server span that the events inside it join (for the
    /// span-events layer).
    fn make_request_span(&self, request: &RequestScope) -> Option<Id> {
        let ids = W3cTraceparent::of(request.cx.span().span_context());
        let (trace_id, span_id) = (
            tracing::field::display(ids.trace_id()),
            tracing::field::display(ids.span_id()),
        );
        let fields = REQUEST_METADATA.fields();
        let (Some(trace_field), Some(span_field)) = (fields.field(TRACE_ID), fields.field(SPAN_ID))
        else {
            return None;
        };
        let values: [(&Field, Option<&dyn tracing::Value>); 2] = [
            (&trace_field, Some(&trace_id)),
            (&span_field, Some(&span_id)),
        ];
        let values = fields.value_set(&values);
        let span = request
            .dispatch
            .new_span(&Attributes::new_root(&REQUEST_METADATA, &values));
        if let Some(data) = self.registry.span(&span) {
            data.extensions_mut()
                .insert(RequestSpanContext(request.cx.clone()));
        }
        Some(span)
    }
}

impl Subscriber for RequestRegistry {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.registry.on_register_dispatch(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.registry.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.registry.enabled(metadata)
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        self.registry.max_level_hint()
    }

    /// A span made inside a request, with no span entered and no explicit parent, is
    /// the request span's child.
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        if span.is_contextual() && self.registry.current_span().id().is_none() {
            if let Some(request) = self.request_span() {
                let child = Attributes::child_of(request, span.metadata(), span.values());
                return self.registry.new_span(&child);
            }
        }
        self.registry.new_span(span)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        self.registry.record(span, values);
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.registry.record_follows_from(span, follows);
    }

    fn event_enabled(&self, event: &Event<'_>) -> bool {
        self.registry.event_enabled(event)
    }

    fn event(&self, event: &Event<'_>) {
        self.registry.event(event);
    }

    fn enter(&self, span: &Id) {
        self.registry.enter(span);
    }

    fn exit(&self, span: &Id) {
        self.registry.exit(span);
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.registry.clone_span(id)
    }

    fn try_close(&self, id: Id) -> bool {
        self.registry.try_close(id)
    }

    /// The entered span, or else the request's (made now if need be).
    fn current_span(&self) -> Current {
        let current = self.registry.current_span();
        if current.id().is_some() {
            return current;
        }
        match self.request_span() {
            Some(request) => Current::new(request, &REQUEST_METADATA),
            None => current,
        }
    }

    // The layers above find the registry through this, to look spans up.
    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        if id == std::any::TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: the registry's own answer for its own type ids.
        unsafe { self.registry.downcast_raw(id) }
    }
}

impl<'a> LookupSpan<'a> for RequestRegistry {
    type Data = <Registry as LookupSpan<'a>>::Data;

    fn span_data(&'a self, id: &Id) -> Option<Self::Data> {
        self.registry.span_data(id)
    }

    fn register_filter(&mut self) -> FilterId {
        self.registry.register_filter()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};

    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId};
    use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt as _};
    use tracing_subscriber::Layer;

    use super::*;

    /// What a dispatch's registry saw of spans: each made (its name and its parent's),
    /// and each closed.
    #[derive(Clone, Default)]
    struct SpanLog(Arc<Mutex<Vec<String>>>);

    impl SpanLog {
        fn entries(&self) -> Vec<String> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }
    }

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SpanLog {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
            let span = ctx.span(id).expect("the new span");
            let parent = span.parent().map(|p| p.name()).unwrap_or("none");
            let made = format!("made {} in {parent}", attrs.metadata().name());
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(made);
        }

        fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
            let name = ctx.span(&id).map_or("?", |s| s.name());
            let closed = format!("closed {name}");
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(closed);
        }
    }

    fn logged_dispatch() -> (Dispatch, SpanLog) {
        let log = SpanLog::default();
        (
            Dispatch::new(RequestRegistry::default().with(log.clone())),
            log,
        )
    }

    fn request_context() -> Context {
        let context = SpanContext::new(
            TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736),
            SpanId::from(0x00f0_67aa_0ba9_02b7),
            TraceFlags::SAMPLED,
            false,
            Default::default(),
        );
        Context::new().with_remote_span_context(context)
    }

    #[tokio::test]
    async fn a_request_that_logs_nothing_makes_no_span() {
        let (dispatch, log) = logged_dispatch();
        let _default = tracing::dispatcher::set_default(&dispatch);
        let cx = request_context();
        let answer = in_request(cx, dispatch.clone(), async { 42 }).await;
        assert_eq!(answer, 42);
        assert_eq!(log.entries(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn what_asks_inside_a_request_gets_its_span_made_once_and_closed_at_its_end() {
        let (dispatch, log) = logged_dispatch();
        let _default = tracing::dispatcher::set_default(&dispatch);
        let cx = request_context();
        in_request(cx, dispatch.clone(), async {
            let current = tracing::Span::current();
            assert_eq!(current.metadata().map(|m| m.name()), Some(REQUEST_SPAN));
            tracing::info_span!("work").in_scope(|| {
                let current = tracing::Span::current();
                assert_eq!(current.metadata().map(|m| m.name()), Some("work"));
                tracing::info_span!("nested").in_scope(|| {});
            });
            tracing::info_span!(parent: None, "unparented").in_scope(|| {});
            tokio::task::yield_now().await;
            assert_eq!(
                log.entries()
                    .iter()
                    .filter(|e| e.contains("closed request"))
                    .count(),
                0
            );
        })
        .await;
        tracing::info_span!("after").in_scope(|| {});
        assert_eq!(
            log.entries(),
            [
                "made request in none",
                "made work in request",
                "made nested in work",
                "closed nested",
                "closed work",
                "made unparented in none",
                "closed unparented",
                "closed request",
                "made after in none",
                "closed after",
            ]
        );
    }

    /// A layer that looks up the current span whenever a span is made.
    struct AsksForTheCurrentSpan;

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for AsksForTheCurrentSpan {
        fn on_new_span(&self, _: &Attributes<'_>, _: &Id, ctx: LayerContext<'_, S>) {
            let _ = ctx.lookup_current();
        }
    }

    #[tokio::test]
    async fn a_layer_asking_for_the_current_span_while_the_request_span_is_made_gets_none() {
        let log = SpanLog::default();
        let registry = RequestRegistry::default().with(AsksForTheCurrentSpan);
        let dispatch = Dispatch::new(registry.with(log.clone()));
        let _default = tracing::dispatcher::set_default(&dispatch);
        in_request(request_context(), dispatch.clone(), async {
            tracing::info_span!("work").in_scope(|| {});
        })
        .await;
        assert_eq!(
            log.entries(),
            [
                "made request in none",
                "made work in request",
                "closed work",
                "closed request"
            ]
        );
    }

    #[tokio::test]
    async fn a_request_dropped_midway_closes_its_span() {
        let (dispatch, log) = logged_dispatch();
        let _default = tracing::dispatcher::set_default(&dispatch);
        let cx = request_context();
        let request = in_request(cx, dispatch.clone(), async {
            let _made = tracing::Span::current();
            std::future::pending::<()>().await;
        });
        let cut_off = tokio::time::timeout(std::time::Duration::from_millis(10), request).await;
        assert!(cut_off.is_err());
        assert_eq!(log.entries(), ["made request in none", "closed request"]);
    }

    #[tokio::test]
    async fn another_dispatch_inside_a_request_does_not_get_its_span() {
        let (served_under, served_log) = logged_dispatch();
        let (other, other_log) = logged_dispatch();
        let cx = request_context();
        in_request(cx, served_under.clone(), async {
            tracing::dispatcher::with_default(&other, || {
                tracing::info_span!("elsewhere").in_scope(|| {});
            });
        })
        .await;
        assert_eq!(
            other_log.entries(),
            ["made elsewhere in none", "closed elsewhere"]
        );
        assert_eq!(served_log.entries(), Vec::<String>::new());
    }
}
