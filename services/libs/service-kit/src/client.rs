//! [`TracedClient`]: the gateway's calls to its backends, hyper's HTTP/1.1 connections with
//! nothing in between, each request a client span carrying the W3C trace context.
//!
//! The gateway makes three calls per invoice; reqwest's per-request layers (URL parsing
//! and conversion, redirect and decompression handling, boxed timeouts) cost more than
//! the rest of its work (`bench/run`). Timeouts are `tokio::time::timeout` around the
//! whole exchange, and an answer's body is read up to a cap, never whole whatever its
//! size.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::header::HOST;
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{HeaderValue, Request, Uri};
use bytes::Bytes;
use futures::future::{Either, FutureExt as _};
use http_body_util::{BodyExt as _, Empty, Limited};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue, StringValue};
use opentelemetry_sdk::trace::SdkTracer;

use dronelab_contract::telemetry::attribute;

use crate::leaf_span::LeafSpan;
use crate::telemetry::{inject_span_context, Telemetry};

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
    servers: Arc<ServerAttributes>,
}

/// The `server.address` and `server.port` attributes of the authorities (`host[:port]`) a
/// client calls or a server is called by, described once for each: parsing the authority
/// and copying the host into a new string for every call cost ~350 instructions. The
/// host is kept for the life of the process ([`kept_host`]), so that each span's copy is
/// a pointer: shared as an `Arc<str>`, it was counted up at every call and down again on
/// the export thread, and cloning the cached attributes cost ~240 instructions a call.
#[derive(Debug, Default)]
pub(crate) struct ServerAttributes(Mutex<Vec<(Box<str>, Described)>>);

/// An authority's host (kept, or shared once none can be) and port.
#[derive(Debug)]
struct Described {
    host: StringValue,
    port: Option<u16>,
}

impl Described {
    fn add(&self, attributes: &mut Vec<KeyValue>) {
        attributes.push(KeyValue::new(attribute::SERVER_ADDRESS, self.host.clone()));
        if let Some(port) = self.port {
            attributes.push(KeyValue::new(attribute::SERVER_PORT, i64::from(port)));
        }
    }
}

impl ServerAttributes {
    /// Authorities beyond this many are described at every call: a server's are its
    /// callers' `Host` headers, whatever they send.
    const CACHED: usize = 32;

    /// Appends `authority`'s attributes to `attributes`.
    pub(crate) fn add(&self, authority: &str, attributes: &mut Vec<KeyValue>) {
        // Entries are pushed whole: one left by a panicking holder is still sound.
        let mut cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Compared as written: `Authority`'s own equality ignores case, letter by letter.
        let known = cached.iter().find(|(a, _)| **a == *authority);
        if let Some((_, described)) = known {
            described.add(attributes);
            return;
        }
        let (host, port) = host_and_port(authority);
        // Only a host that is cached is kept: past the cache's bound, a request does not
        // take the process-wide lock of the kept hosts.
        let caching = cached.len() < Self::CACHED;
        let host = match caching.then(|| kept_host(host)).flatten() {
            Some(kept) => StringValue::from(kept),
            None => StringValue::from(Arc::<str>::from(host)),
        };
        let described = Described { host, port };
        described.add(attributes);
        if caching {
            cached.push((authority.into(), described));
        }
    }
}

/// `host` kept for the life of the process, the same copy for every caller; `None` once
/// [`KEPT_HOSTS`] are kept, or for a host longer than a DNS name can be. That bounds what
/// is kept to 16 KiB, whatever `Host` headers a server's callers send.
fn kept_host(host: &str) -> Option<&'static str> {
    static KEPT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    const LONGEST: usize = 255;
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = kept.iter().find(|k| **k == host) {
        return Some(known);
    }
    if kept.len() >= KEPT_HOSTS || host.len() > LONGEST {
        return None;
    }
    let host: &'static str = Box::leak(host.into());
    kept.push(host);
    Some(host)
}

/// How many hosts [`kept_host`] keeps in a process.
const KEPT_HOSTS: usize = 64;

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
            servers: Arc::default(),
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
        let span = CallSpan::start(&self.telemetry, &self.servers, parent, span_name, &uri);
        let mut request = Request::get(uri);
        if let Some(headers) = request.headers_mut() {
            span.inject(parent, headers);
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
            span.end(&outcome);
            outcome
        })
    }
}

/// A call's client span: none without tracing; most often a [`LeafSpan`]; made by the
/// SDK's tracer where only its sampler can tell whether to record it (no parent, or a
/// parent not recording).
enum CallSpan<'a> {
    Untraced,
    Leaf(LeafSpan<'a>),
    Sdk(Context),
}

impl<'a> CallSpan<'a> {
    /// The client span of `GET uri`, as a child of `parent`.
    fn start(
        telemetry: &'a Telemetry,
        servers: &ServerAttributes,
        parent: &Context,
        name: &'static str,
        uri: &Uri,
    ) -> Self {
        // Without tracing there is no span to describe: skip building its attributes.
        let (Some(tracer), Some(leaves)) = (telemetry.sdk_tracer(), telemetry.leaf_spans()) else {
            return Self::Untraced;
        };
        // Room for what `end` adds: the span keeps this vector, and a full one would be
        // copied into a larger one there.
        let mut attributes = Vec::with_capacity(6);
        attributes.extend([
            KeyValue::new(attribute::HTTP_REQUEST_METHOD, "GET"),
            KeyValue::new(attribute::URL_FULL, full_url(uri)),
        ]);
        if let Some(authority) = uri.authority() {
            servers.add(authority.as_str(), &mut attributes);
        }
        match LeafSpan::start(leaves, parent, name, SpanKind::Client, attributes) {
            Ok(leaf) => Self::Leaf(leaf),
            Err(attributes) => Self::Sdk(sdk_span(tracer, parent, name, attributes)),
        }
    }

    /// Writes the span's context into the call's headers (`parent`'s, untraced, as a
    /// service without tracing passes on the context it was called with).
    fn inject(&self, parent: &Context, headers: &mut axum::http::HeaderMap) {
        match self {
            Self::Untraced => inject_span_context(parent.span().span_context(), headers),
            Self::Leaf(leaf) => {
                if let Some(context) = leaf.span_context() {
                    inject_span_context(context, headers);
                }
            }
            Self::Sdk(cx) => inject_span_context(cx.span().span_context(), headers),
        }
    }

    /// Ends the span with the call's outcome.
    fn end(self, outcome: &CallOutcome) {
        match self {
            Self::Untraced => {}
            Self::Leaf(leaf) => {
                let (attribute, status) = described(outcome);
                leaf.end(attribute, status);
            }
            Self::Sdk(cx) => {
                let (attribute, status) = described(outcome);
                let span = cx.span();
                span.set_attribute(attribute);
                if let Some(status) = status {
                    span.set_status(status);
                }
                span.end();
            }
        }
    }
}

/// A client span made by the SDK's tracer, as a child of `parent`.
fn sdk_span(
    tracer: &SdkTracer,
    parent: &Context,
    name: &'static str,
    attributes: Vec<KeyValue>,
) -> Context {
    let span = tracer
        .span_builder(name)
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
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};

    use super::*;

    /// `server.address` and `server.port` (when it has one) of an authority, `host[:port]`:
    /// a client span's target, or a server span's `Host`, made afresh: what
    /// [`ServerAttributes`] must give.
    fn server_attributes(authority: &str, attributes: &mut Vec<KeyValue>) {
        let (host, port) = host_and_port(authority);
        attributes.push(KeyValue::new(
            attribute::SERVER_ADDRESS,
            StringValue::from(Arc::<str>::from(host)),
        ));
        if let Some(port) = port {
            attributes.push(KeyValue::new(attribute::SERVER_PORT, i64::from(port)));
        }
    }

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

    /// Ended spans apart from what differs from one span to the next: their ids and
    /// times.
    fn comparable(mut span: SpanData) -> SpanData {
        span.span_context = SpanContext::new(
            span.span_context.trace_id(),
            SpanId::INVALID,
            span.span_context.trace_flags(),
            span.span_context.is_remote(),
            span.span_context.trace_state().clone(),
        );
        span.start_time = std::time::SystemTime::UNIX_EPOCH;
        span.end_time = std::time::SystemTime::UNIX_EPOCH;
        span
    }

    #[test]
    fn a_leaf_span_is_recorded_as_the_sdk_records_the_same_span() {
        let spans = InMemorySpanExporter::default();
        let telemetry = Telemetry::with_exporter("caller", spans.clone());
        let tracer = telemetry.sdk_tracer().expect("tracing on");
        let state = TraceState::from_key_value([("vendor", "a1")]).expect("trace state");
        let remote = SpanContext::new(
            TraceId::from(7),
            SpanId::from(8),
            TraceFlags::SAMPLED,
            true,
            state,
        );
        let parent =
            tracer.start_with_context("request", &Context::new().with_remote_span_context(remote));
        let parent = Context::new().with_span(parent);
        let uri = Uri::from_static("http://127.0.0.1:9/api/deliveries/summary?ownerId=o1");
        let outcome = CallOutcome::Response {
            status: 503,
            body: Bytes::new(),
        };
        let servers = ServerAttributes::default();
        let leaf = CallSpan::start(&telemetry, &servers, &parent, "GET deliveries", &uri);
        assert!(matches!(leaf, CallSpan::Leaf(_)));
        leaf.end(&outcome);
        let mut attributes = Vec::new();
        let with_sdk = CallSpan::start(
            &telemetry,
            &servers,
            &Context::new(),
            "GET deliveries",
            &uri,
        );
        let CallSpan::Sdk(_) = &with_sdk else {
            panic!("a call without a parent span is the SDK's to sample");
        };
        drop(with_sdk);
        attributes.extend([
            KeyValue::new(attribute::HTTP_REQUEST_METHOD, "GET"),
            KeyValue::new(attribute::URL_FULL, full_url(&uri)),
        ]);
        server_attributes("127.0.0.1:9", &mut attributes);
        CallSpan::Sdk(sdk_span(tracer, &parent, "GET deliveries", attributes)).end(&outcome);
        let finished = spans.get_finished_spans().expect("spans");
        let [leaf, _root, sdk] = <[SpanData; 3]>::try_from(finished).expect("three spans");
        let parent_context = parent.span().span_context().clone();
        assert_eq!(leaf.parent_span_id, parent_context.span_id());
        assert_ne!(leaf.span_context.span_id(), SpanId::INVALID);
        assert!(leaf.end_time >= leaf.start_time);
        assert_eq!(leaf.status, Status::error("HTTP 503"));
        assert_eq!(comparable(leaf), comparable(sdk));
    }

    #[test]
    fn a_leaf_span_dropped_before_its_end_is_recorded_as_an_sdk_span_would_be() {
        let spans = InMemorySpanExporter::default();
        let telemetry = Telemetry::with_exporter("caller", spans.clone());
        let parent = Context::new().with_span(telemetry.tracer().start("request"));
        let uri = Uri::from_static("http://[::1]:80/");
        let leaf = CallSpan::start(&telemetry, &Default::default(), &parent, "GET", &uri);
        assert!(matches!(leaf, CallSpan::Leaf(_)));
        drop(leaf);
        let finished = spans.get_finished_spans().expect("spans");
        let [call] = <[SpanData; 1]>::try_from(finished).expect("one span");
        assert_eq!(call.span_kind, SpanKind::Client);
        assert_eq!(call.status, Status::Unset);
        assert_eq!(call.attributes.len(), 4, "{:?}", call.attributes);
    }

    #[test]
    fn an_origins_server_attributes_are_the_same_made_or_cached() {
        let servers = ServerAttributes::default();
        for text in [
            "127.0.0.1:8091",
            "[::1]:80",
            "Example.com",
            "example.com",
            "[::1]:80",
        ] {
            let mut expected = Vec::new();
            server_attributes(text, &mut expected);
            for _ in 0..2 {
                let mut described = vec![KeyValue::new("before", 1)];
                servers.add(text, &mut described);
                assert_eq!(described[1..], expected[..], "{text}");
            }
        }
        let cached = servers.0.lock().expect("cache").len();
        assert_eq!(cached, 4, "one entry an origin as written");
    }

    #[test]
    fn hosts_are_kept_once_each_and_no_more_than_the_bound() {
        let first = kept_host("kept-once.example").expect("kept");
        let again = kept_host("kept-once.example").expect("kept");
        assert!(std::ptr::eq(first, again), "the same copy");
        assert_eq!(kept_host(&"x".repeat(256)), None, "longer than a DNS name");
        // Other tests keep hosts too: fill whatever room is left, then one more.
        let mut refused = 0;
        for n in 0..=KEPT_HOSTS {
            if kept_host(&format!("host-{n}.example")).is_none() {
                refused += 1;
            }
        }
        assert!(refused >= 1, "the bound holds");
        assert_eq!(
            kept_host("kept-once.example"),
            Some(first),
            "a kept host stays"
        );
        // A host that can no longer be kept is still described, and cached.
        let servers = ServerAttributes::default();
        let mut expected = Vec::new();
        server_attributes("unkept.example:81", &mut expected);
        for _ in 0..2 {
            let mut described = Vec::new();
            servers.add("unkept.example:81", &mut described);
            assert_eq!(described, expected);
        }
        assert_eq!(servers.0.lock().expect("cache").len(), 1);
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
