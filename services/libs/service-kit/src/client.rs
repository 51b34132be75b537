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
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use dronelab_contract::telemetry::attribute;

use crate::telemetry::Telemetry;

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
        // Without tracing there is no span to describe: skip building its attributes.
        let tracer = self.telemetry.sdk_tracer();
        let traced = tracer.is_some();
        let cx = match tracer {
            Some(tracer) => start_span(tracer, parent, span_name, &uri),
            None => parent.clone(),
        };
        let mut request = Request::get(uri);
        if let Some(headers) = request.headers_mut() {
            self.telemetry.inject(&cx, headers);
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
        outcome.map(move |outcome| {
            if traced {
                end_span(&cx, &outcome);
            }
            outcome
        })
    }
}

/// The client span of `GET uri`, as a child of `parent`.
fn start_span(tracer: &SdkTracer, parent: &Context, span_name: &'static str, uri: &Uri) -> Context {
    // Room for what `end_span` adds: the span keeps this vector, and a full one would
    // be copied into a larger one there.
    let mut attributes = Vec::with_capacity(6);
    attributes.extend([
        KeyValue::new(attribute::HTTP_REQUEST_METHOD, "GET"),
        KeyValue::new(attribute::URL_FULL, full_url(uri)),
    ]);
    if let Some(authority) = uri.authority() {
        server_attributes(authority.as_str(), &mut attributes);
    }
    let span = tracer
        .span_builder(span_name)
        .with_kind(SpanKind::Client)
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    parent.with_span(span)
}

/// `uri` as text, put together from its parts (its `Display` goes through the
/// formatting machinery, several times the cost).
fn full_url(uri: &Uri) -> String {
    let (scheme, authority) = (uri.scheme_str(), uri.authority().map(Authority::as_str));
    let (path, query) = (uri.path(), uri.query());
    let mut text = String::with_capacity(
        scheme.map_or(0, |s| s.len() + 3)
            + authority.map_or(0, str::len)
            + path.len()
            + query.map_or(0, |q| q.len() + 1),
    );
    if let Some(scheme) = scheme {
        text.push_str(scheme);
        text.push_str("://");
    }
    text.push_str(authority.unwrap_or_default());
    text.push_str(path);
    if let Some(query) = query {
        text.push('?');
        text.push_str(query);
    }
    text
}

/// `server.address` and `server.port` (when it has one) of an authority, `host[:port]`:
/// a client span's target, or a server span's `Host`.
pub(crate) fn server_attributes(authority: &str, attributes: &mut Vec<KeyValue>) {
    let (host, port) = host_and_port(authority);
    attributes.push(KeyValue::new(attribute::SERVER_ADDRESS, host.to_owned()));
    if let Some(port) = port {
        attributes.push(KeyValue::new(attribute::SERVER_PORT, i64::from(port)));
    }
}

/// An authority's host (an IPv6 one in brackets) and port, as `Uri::host` and
/// `Uri::port_u16` give them. Those parse the authority again at each call: ~700
/// instructions together for a backend's short authority, three times this.
fn host_and_port(authority: &str) -> (&str, Option<u16>) {
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, rest)| rest);
    let port_from = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.find(']').map_or(host_port.len(), |end| end + 2),
        None => host_port.find(':').unwrap_or(host_port.len()),
    };
    let (host, port) = host_port.split_at(port_from);
    (host, port.strip_prefix(':').and_then(|p| p.parse().ok()))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The invoice's future holds three calls, and axum moves it into the heap whole:
    /// each call's future was 4,128 bytes before its connection was boxed and its
    /// request kept once.
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
        assert!(size <= 1_280, "a call's future is {size} bytes");
    }

    #[test]
    fn a_full_url_reads_as_the_uri_displays() {
        for text in [
            "http://127.0.0.1:8091/api/deliveries/summary?ownerId=o00042&year=2026&month=3",
            "http://[::1]:80/",
            "http://example.com",
            "/relative?q=1",
            "https://host/a/b",
        ] {
            let uri = Uri::try_from(text).expect("uri");
            assert_eq!(full_url(&uri), uri.to_string(), "{text}");
        }
    }

    #[test]
    fn the_host_and_port_are_the_uris() {
        for text in [
            "http://127.0.0.1:8091/api/deliveries/summary?ownerId=o00042",
            "http://[::1]:80/",
            "http://[::1]/",
            "http://example.com",
            "http://user:secret@example.com:8443/a",
            "http://user@[fe80::1]:9/",
            "http://host:/",
        ] {
            let uri = Uri::try_from(text).expect("uri");
            let authority = uri.authority().expect("authority").as_str();
            assert_eq!(
                host_and_port(authority),
                (uri.host().expect("host"), uri.port_u16()),
                "{text}"
            );
        }
    }
}
