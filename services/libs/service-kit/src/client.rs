//! [`TracedClient`]: the gateway's calls to its backends, hyper's pooled client with
//! nothing in between, each request a client span carrying the W3C trace context.
//!
//! The gateway makes three calls per invoice; reqwest's per-request layers (URL parsing
//! and conversion, redirect and decompression handling, boxed timeouts) cost more than
//! the rest of its work (`bench/run`). Timeouts are `tokio::time::timeout` around the
//! whole exchange, and an answer's body is read up to a cap, never whole whatever its
//! size.

use std::time::Duration;

use axum::http::{Request, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

use dronelab_contract::telemetry::attribute;

use crate::telemetry::Telemetry;

/// A pooled HTTP/1.1 client for bodiless GETs.
#[derive(Clone, Debug)]
struct HttpClient {
    http: Client<HttpConnector, Empty<Bytes>>,
    max_body_bytes: usize,
}

/// [`HttpClient`] whose requests are client spans of `telemetry`.
#[derive(Clone, Debug)]
pub struct TracedClient {
    http: HttpClient,
    telemetry: Telemetry,
}

/// What came back from a backend: status and body, or why nothing came back.
#[derive(Debug)]
pub enum CallOutcome {
    Response {
        status: u16,
        body: Bytes,
    },
    /// The connection could not be made (refused, reset before any response).
    ConnectFailed(String),
    TimedOut,
    Failed(String),
}

/// An error with its causes, `outer: inner: innermost` (hyper's own messages are terse).
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl HttpClient {
    /// Keep-alive connections (at most `pool_per_host` idle per host) are reused across
    /// requests, and closed after 20 s idle: before a dronelab server closes them (30 s,
    /// `lifecycle::http`), so a request never races the server's close.
    fn new(pool_per_host: usize, max_body_bytes: usize) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(pool_per_host)
            .pool_idle_timeout(Duration::from_secs(20))
            .pool_timer(TokioTimer::new())
            .build(connector);
        Self {
            http,
            max_body_bytes,
        }
    }

    async fn send(&self, request: Request<Empty<Bytes>>, timeout: Duration) -> CallOutcome {
        let call = async {
            let response = self.http.request(request).await.map_err(|e| {
                if e.is_connect() {
                    CallOutcome::ConnectFailed(describe(&e))
                } else {
                    CallOutcome::Failed(describe(&e))
                }
            })?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), self.max_body_bytes)
                .collect()
                .await
                .map_err(|e| {
                    CallOutcome::Failed(if e.is::<http_body_util::LengthLimitError>() {
                        format!("the answer is larger than {} bytes", self.max_body_bytes)
                    } else {
                        describe(e.as_ref())
                    })
                })?
                .to_bytes();
            Ok(CallOutcome::Response { status, body })
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(outcome) | Err(outcome)) => outcome,
            Err(_) => CallOutcome::TimedOut,
        }
    }
}

impl TracedClient {
    /// Keep-alive connections (at most `pool_per_host` idle per host, closed after 20 s
    /// idle) are reused across requests; a body beyond `max_body_bytes` fails the call.
    pub fn new(telemetry: Telemetry, pool_per_host: usize, max_body_bytes: usize) -> Self {
        Self {
            http: HttpClient::new(pool_per_host, max_body_bytes),
            telemetry,
        }
    }

    /// `GET uri` as a child of `parent`, giving up after `timeout`.
    pub async fn get(
        &self,
        parent: &Context,
        span_name: &str,
        uri: Uri,
        timeout: Duration,
    ) -> CallOutcome {
        // Without tracing there is no span to describe: skip building its attributes.
        let cx = if self.telemetry.enabled() {
            self.start_span(parent, span_name, &uri)
        } else {
            parent.clone()
        };
        let mut request = Request::get(uri);
        if let Some(headers) = request.headers_mut() {
            self.telemetry.inject(&cx, headers);
        }
        let outcome = match request.body(Empty::new()) {
            Ok(request) => self.http.send(request, timeout).await,
            Err(e) => CallOutcome::Failed(e.to_string()),
        };
        if self.telemetry.enabled() {
            end_span(&cx, &outcome);
        }
        outcome
    }

    fn start_span(&self, parent: &Context, span_name: &str, uri: &Uri) -> Context {
        let tracer = self.telemetry.tracer();
        let mut attributes = vec![
            KeyValue::new(attribute::HTTP_REQUEST_METHOD, "GET"),
            KeyValue::new(attribute::URL_FULL, uri.to_string()),
        ];
        if let Some(host) = uri.host() {
            attributes.push(KeyValue::new(attribute::SERVER_ADDRESS, host.to_owned()));
        }
        if let Some(port) = uri.port_u16() {
            attributes.push(KeyValue::new(attribute::SERVER_PORT, i64::from(port)));
        }
        let span = tracer
            .span_builder(span_name.to_owned())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(tracer, parent);
        parent.with_span(span)
    }
}

fn end_span(cx: &Context, outcome: &CallOutcome) {
    let span = cx.span();
    match outcome {
        CallOutcome::Response { status, .. } => {
            span.set_attribute(KeyValue::new(
                attribute::HTTP_RESPONSE_STATUS_CODE,
                i64::from(*status),
            ));
            if *status >= 400 {
                span.set_status(Status::error(format!("HTTP {status}")));
            }
        }
        CallOutcome::TimedOut => {
            span.set_attribute(KeyValue::new(attribute::ERROR_TYPE, "timeout"));
            span.set_status(Status::error("timed out"));
        }
        CallOutcome::ConnectFailed(e) | CallOutcome::Failed(e) => {
            span.set_attribute(KeyValue::new(attribute::ERROR_TYPE, "connection"));
            span.set_status(Status::error(e.clone()));
        }
    }
    span.end();
}
