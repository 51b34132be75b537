//! [`TracedClient`]: the gateway's calls to its backends, hyper's HTTP/1.1 connections with
//! nothing in between, each request a client span carrying the W3C trace context.
//!
//! The gateway makes three calls per invoice; reqwest's per-request layers (URL parsing
//! and conversion, redirect and decompression handling, boxed timeouts) cost more than
//! the rest of its work (`bench/run`). Timeouts are `tokio::time::timeout` around the
//! whole exchange, and an answer's body is read up to a cap, never whole whatever its
//! size.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header::HOST;
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{HeaderValue, Request, Uri};
use bytes::Bytes;
use futures::future::{Either, FutureExt as _};
use http_body_util::{BodyExt as _, Empty, Limited};
use opentelemetry::trace::{Status, TraceContextExt as _};
use opentelemetry::{Context, KeyValue};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use dronelab_contract::telemetry::attribute;

use crate::telemetry::{Telemetry, SPAN_TARGET};

mod connections;

use connections::{ConnectError, ConnectionSet};

/// A keep-alive HTTP/1.1 client for bodiless GETs to `http://` origins.
#[derive(Debug)]
struct HttpClient {
    connections: ConnectionSet,
    max_body_bytes: usize,
}

/// [`HttpClient`] whose requests are client spans of `telemetry`.
#[derive(Clone, Debug)]
pub struct TracedClient {
    http: Arc<HttpClient>,
    telemetry: Telemetry,
}

/// The `server.address` and `server.port` (when it names one) of an authority,
/// `host[:port]`: a client span's target, or a server span's `Host`. Nothing for text
/// that is no authority.
pub(crate) fn server_address(authority: &str) -> Vec<KeyValue> {
    let Ok(authority) = authority.parse::<Authority>() else {
        return Vec::new();
    };
    let mut attributes = vec![KeyValue::new(
        attribute::SERVER_ADDRESS,
        authority.host().to_owned(),
    )];
    if let Some(port) = authority.port_u16() {
        attributes.push(KeyValue::new(attribute::SERVER_PORT, i64::from(port)));
    }
    attributes
}

/// What came back from a backend: status and body, or why nothing came back.
#[derive(Debug)]
pub enum CallOutcome {
    Response {
        status: u16,
        body: Bytes,
    },
    /// The connection could not be made (refused, unreachable, not within 2 s).
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
    /// Keep-alive connections (at most `pool_per_host` idle per origin) are reused
    /// across requests, and closed after 20 s idle: before a dronelab server closes them
    /// (30 s, `lifecycle::http`), so a request never races the server's close.
    fn new(pool_per_host: usize, max_body_bytes: usize) -> Self {
        Self {
            connections: ConnectionSet::new(
                pool_per_host,
                Duration::from_secs(20),
                Duration::from_secs(2),
            ),
            max_body_bytes,
        }
    }

    /// `request` (to an absolute `http://` URI) as it goes on the wire, its target in
    /// origin form and the origin in `Host`, and the origin to connect to.
    fn prepare(
        mut request: Request<Empty<Bytes>>,
    ) -> Result<(Authority, Request<Empty<Bytes>>), CallOutcome> {
        let uri = request.uri();
        let origin = match (uri.scheme(), uri.authority()) {
            (Some(scheme), Some(origin)) if *scheme == Scheme::HTTP => origin.clone(),
            _ => return Err(CallOutcome::Failed(format!("not an http:// URI: {uri}"))),
        };
        let target = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        *request.uri_mut() = Uri::from(target);
        match HeaderValue::from_str(origin.as_str()) {
            Ok(host) => request.headers_mut().insert(HOST, host),
            Err(e) => return Err(CallOutcome::Failed(format!("bad host {origin}: {e}"))),
        };
        Ok((origin, request))
    }

    /// One request and its answer on a connection borrowed from the set, which gets it
    /// back only once the answer's body has been read to the end.
    ///
    /// An `async` block, not an `async fn`, which keeps its arguments in its future
    /// twice (as passed, and as the body's locals): the request is 224 bytes, and the
    /// invoice's future holds three calls, whose size axum copies when it boxes it.
    /// ([`TracedClient::get`] is made of combinators for the same reason.)
    #[allow(clippy::manual_async_fn)]
    fn exchange(
        &self,
        origin: Authority,
        mut request: Request<Empty<Bytes>>,
    ) -> impl Future<Output = CallOutcome> + Send + '_ {
        async move {
            loop {
                let (mut connection, reused) = match self.connections.checkout(&origin).await {
                    Ok(checked_out) => checked_out,
                    Err(ConnectError::Connect(e)) => return CallOutcome::ConnectFailed(e),
                    Err(ConnectError::Handshake(e)) => return CallOutcome::Failed(e),
                };
                let sending = connection.sender.try_send_request(request);
                let response = match connection.drive(sending).await {
                    Ok(response) => response,
                    Err(mut e) => match e.take_message() {
                        // A reused connection the peer closed before the request went
                        // out: nothing was sent, so it goes again on another one.
                        Some(unsent) if reused => {
                            request = unsent;
                            continue;
                        }
                        _ => return CallOutcome::Failed(describe(e.error())),
                    },
                };
                let status = response.status().as_u16();
                let reading = Limited::new(response.into_body(), self.max_body_bytes).collect();
                return match connection.drive(reading).await {
                    Ok(body) => {
                        self.connections.release(&origin, connection);
                        CallOutcome::Response {
                            status,
                            body: body.to_bytes(),
                        }
                    }
                    Err(e) if e.is::<http_body_util::LengthLimitError>() => CallOutcome::Failed(
                        format!("the answer is larger than {} bytes", self.max_body_bytes),
                    ),
                    Err(e) => CallOutcome::Failed(describe(e.as_ref())),
                };
            }
        }
    }
}

impl TracedClient {
    /// Keep-alive connections (at most `pool_per_host` idle per host, closed after 20 s
    /// idle) are reused across requests; a body beyond `max_body_bytes` fails the call.
    pub fn new(telemetry: Telemetry, pool_per_host: usize, max_body_bytes: usize) -> Self {
        Self {
            http: Arc::new(HttpClient::new(pool_per_host, max_body_bytes)),
            telemetry,
        }
    }

    /// `GET uri` as a child of `parent`, giving up after `timeout`. The client span and
    /// the timeout's clock start at the call, so call it inside a Tokio runtime and await
    /// it then; the span ends with the outcome, or when the future is dropped.
    pub fn get(
        &self,
        parent: &Context,
        span_name: &'static str,
        uri: Uri,
        timeout: Duration,
    ) -> impl Future<Output = CallOutcome> + Send + '_ {
        let (span, cx) = self.call_span(parent, span_name, &uri);
        let mut request = Request::get(uri);
        if let Some(headers) = request.headers_mut() {
            // The call's own context; untraced, the caller's, passed on as received.
            self.telemetry
                .inject(cx.as_ref().unwrap_or(parent), headers);
        }
        let exchange = request
            .body(Empty::new())
            .map_err(|e| CallOutcome::Failed(e.to_string()))
            .and_then(HttpClient::prepare);
        // Combinators, not an `async` block: a block would hold the exchange's future
        // twice, as captured and as awaited.
        let outcome = match exchange {
            Ok((origin, request)) => Either::Left(
                tokio::time::timeout(timeout, self.http.exchange(origin, request))
                    .map(|answered| answered.unwrap_or(CallOutcome::TimedOut)),
            ),
            Err(failed) => Either::Right(std::future::ready(failed)),
        };
        // The span is not entered around the exchange, which logs nothing: entering it at
        // every poll would cost more than the rest of the span. It ends when the outcome
        // is recorded, or when the call is dropped.
        outcome.map(move |outcome| {
            if let Some(cx) = &cx {
                record_outcome(cx, &outcome);
            }
            drop(span);
            outcome
        })
    }

    /// The client span of `GET uri`: a `tracing` span of this client's service, whose
    /// OpenTelemetry parent is `parent`, started, with the HTTP client conventions'
    /// attributes when it records; and its OpenTelemetry context, with tracing on.
    fn call_span(
        &self,
        parent: &Context,
        name: &'static str,
        uri: &Uri,
    ) -> (Span, Option<Context>) {
        let telemetry = &self.telemetry;
        let span = tracing::dispatcher::with_default(
            telemetry.dispatch(),
            || tracing::debug_span!(target: SPAN_TARGET, "call", otel.name = name, otel.kind = "client"),
        );
        if !telemetry.enabled() {
            return (span, None);
        }
        let _ = span.set_parent(parent.clone());
        let cx = span.context();
        let recorded = cx.span();
        if recorded.is_recording() {
            let mut attributes = vec![
                KeyValue::new(attribute::HTTP_REQUEST_METHOD, "GET"),
                KeyValue::new(attribute::URL_FULL, uri.to_string()),
            ];
            if let Some(authority) = uri.authority() {
                attributes.extend(server_address(authority.as_str()));
            }
            recorded.set_attributes(attributes);
        }
        (span, Some(cx))
    }
}

/// Records a call's outcome on its span ([`described`]).
fn record_outcome(cx: &Context, outcome: &CallOutcome) {
    let span = cx.span();
    if !span.is_recording() {
        return;
    }
    let (attribute, status) = described(outcome);
    span.set_attribute(attribute);
    if let Some(status) = status {
        span.set_status(status);
    }
}

/// What a client span records of a call's outcome: the answer's status code or the kind
/// of failure, and an error status for a failure or an answer of 400 and above.
fn described(outcome: &CallOutcome) -> (KeyValue, Option<Status>) {
    match outcome {
        CallOutcome::Response { status, .. } => (
            KeyValue::new(attribute::HTTP_RESPONSE_STATUS_CODE, i64::from(*status)),
            (*status >= 400).then(|| Status::error(format!("HTTP {status}"))),
        ),
        CallOutcome::TimedOut => (
            KeyValue::new(attribute::ERROR_TYPE, "timeout"),
            Some(Status::error("timed out")),
        ),
        CallOutcome::ConnectFailed(e) | CallOutcome::Failed(e) => (
            KeyValue::new(attribute::ERROR_TYPE, "connection"),
            Some(Status::error(e.clone())),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The invoice's future holds three calls, and axum moves it into the heap whole.
    #[test]
    fn a_calls_future_stays_small() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let _in_runtime = runtime.enter();
        let client = TracedClient::new(Telemetry::disabled(), 4, 1024);
        let uri = Uri::from_static("http://127.0.0.1:9/api/deliveries/summary");
        let call = client.get(&Context::new(), "GET", uri, Duration::from_secs(1));
        let size = std::mem::size_of_val(&call);
        assert!(size <= 1_536, "a call's future is {size} bytes");
    }

    #[test]
    fn an_authority_is_its_host_and_port() {
        let described = |text: &str| {
            server_address(text)
                .into_iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect::<Vec<_>>()
        };
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            described("127.0.0.1:8091"),
            [
                pair(attribute::SERVER_ADDRESS, "127.0.0.1"),
                pair(attribute::SERVER_PORT, "8091")
            ]
        );
        assert_eq!(
            described("[::1]:80"),
            [
                pair(attribute::SERVER_ADDRESS, "[::1]"),
                pair(attribute::SERVER_PORT, "80")
            ]
        );
        assert_eq!(
            described("example.com"),
            [pair(attribute::SERVER_ADDRESS, "example.com")]
        );
        assert!(described("not an authority").is_empty());
    }
}
