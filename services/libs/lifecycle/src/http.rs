//! Serving HTTP with the connection limits every dronelab server shares.
//!
//! `axum::serve` closes no connection by itself: one that sends nothing, or its headers a
//! byte at a time, stays open for ever, and enough of them exhaust the process's file
//! descriptors (then every request fails, and nothing says why). [`serve`] bounds both:
//!
//! - **Connections**: at most [`ConnectionLimits::max_connections`] at once (never more
//!   than half the process's open-file limit, so outgoing connections and files still
//!   have room). One more is closed as it arrives.
//! - **Time to send a request's headers**: [`ConnectionLimits::header_read_timeout`],
//!   counted from when the connection starts waiting for a request. A slow sender
//!   (slowloris) is closed after it. A connection must send its first byte within the
//!   same time, which covers HTTP/2's preface; an HTTP/2 connection is then pinged at
//!   that interval and closed if it stops answering.
//! - **Idle connections**: a connection, HTTP/1.1 or HTTP/2, with no request in flight
//!   for that same time is closed gracefully (HTTP/2: GOAWAY): answering pings does not
//!   keep a connection open.
//! - **HTTP/2 flow control**: small windows, few streams and small header lists and send
//!   buffers per connection, so the bytes a peer can make the server buffer stay near
//!   the servers' body budgets ([`BodyBudget`]) rather than grow with each connection.
//!   A receiver of batches takes larger windows and frames over fewer connections
//!   ([`ConnectionLimits::batch_receiver`]).
//!
//! Hitting a limit is logged as a warning, at most one line per limit every 10 s with
//! how many times it was hit since the last line.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// A server's connection limits (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// The time to send a request's headers, and the longest a connection may stay open
    /// with no request in flight (HTTP/1.1 and HTTP/2 alike).
    pub header_read_timeout: Duration,
    /// How far an HTTP/2 peer may send ahead of the server's reading, and in what frames.
    pub http2_flow: Http2Flow,
}

impl Default for ConnectionLimits {
    /// 1024 connections (the local tuning run needs at most a few hundred), 30 s to send
    /// a request's headers (hyper's own default, which `axum::serve` leaves unset), the
    /// small HTTP/2 windows: at most 256 MiB buffered for peers that do not read.
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(30),
            http2_flow: Http2Flow::SMALL,
        }
    }
}

impl ConnectionLimits {
    /// For a receiver of batches from a few senders (the trace viewer's OTLP
    /// receivers): the batch windows and frames, over a quarter of the connections, so
    /// that what they can make the server buffer stays the default's 256 MiB.
    pub fn batch_receiver() -> Self {
        Self {
            max_connections: 256,
            http2_flow: Http2Flow::BATCHES,
            ..Self::default()
        }
    }
}

/// How an HTTP/2 peer may send: the bytes one stream, and a connection's streams
/// together, may send ahead of what the server has read (the flow-control windows), and
/// the largest DATA frame it may send them in.
///
/// Only the presets below exist: HTTP/2 allows frames of 16 KiB to 16 MiB (hyper panics
/// outside them), and a frame larger than the stream's window would let a peer make the
/// server buffer more than the windows say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Flow {
    stream_window: u32,
    connection_window: u32,
    max_frame: u32,
}

impl Http2Flow {
    /// 64 KiB a stream, 256 KiB a connection, in frames of HTTP/2's default 16 KiB:
    /// requests of ordinary size.
    pub const SMALL: Self = Self {
        stream_window: 64 * 1024,
        connection_window: 256 * 1024,
        max_frame: 16 * 1024,
    };

    /// 256 KiB a stream, 1 MiB a connection, a stream's whole window in one frame: a
    /// whole OTLP export in one go. A batch of the gateway's 256 spans is ~85 KB.
    /// - Past a 64 KiB window its sender waits for the server's `WINDOW_UPDATE` before
    ///   the rest, and with a 256 KiB connection window again every third batch. Each
    ///   wait wakes the exporting service's export thread once more, on the core that
    ///   serves its requests: with these windows the traced gateway made 40 % fewer
    ///   context switches and answered 4–9 % more invoices.
    /// - In 16 KiB frames a batch is six DATA frames, and the sender writes each in a
    ///   system call of its own, which on loopback also delivers it to the server and
    ///   wakes it: the gateway's export thread made 8 `writev` calls a batch, in one
    ///   frame 3. A frame is read whole before it is handed on, but it is no larger than
    ///   the stream's window, so what a peer can make the server buffer stays the
    ///   windows'.
    pub const BATCHES: Self = Self {
        stream_window: 256 * 1024,
        connection_window: 1024 * 1024,
        max_frame: 256 * 1024,
    };

    pub fn stream_window(&self) -> u32 {
        self.stream_window
    }

    pub fn connection_window(&self) -> u32 {
        self.connection_window
    }

    pub fn max_frame(&self) -> u32 {
        self.max_frame
    }
}

/// After a failed `accept` (e.g. no file descriptor left), wait this long: retrying at
/// once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a stopping server waits for requests in flight.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// An HTTP/2 connection that does not answer a ping within this is closed.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 beyond the windows and frames ([`Http2Flow`]), sized so what a connection can
/// make the server hold stays small beside the servers' body budgets: at most 32 streams
/// at once, header lists of 64 KiB at most, and at most 64 KiB of an answer waiting for a
/// slow reader per stream.
const H2_MAX_STREAMS: u32 = 32;
const H2_MAX_HEADER_LIST: u32 = 64 * 1024;
const H2_MAX_SEND_BUFFER: usize = 64 * 1024;
/// HTTP/1.1: the most of a request head (and of unread body) buffered per connection.
const H1_MAX_BUFFER: usize = 64 * 1024;

/// How every connection is served: the limits above, for both protocols.
fn connection_builder(limits: &ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(H1_MAX_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(PING_TIMEOUT)
        .initial_stream_window_size(limits.http2_flow.stream_window())
        .initial_connection_window_size(limits.http2_flow.connection_window())
        .adaptive_window(false)
        .max_frame_size(limits.http2_flow.max_frame())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_LIST)
        .max_send_buf_size(H2_MAX_SEND_BUFFER);
    builder
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then stops
/// accepting and lets requests in flight finish (for at most 30 s). `name` names the
/// server in log lines.
///
/// `shutdown` is boxed so that this function is not generic: a generic one is compiled in
/// each crate that calls it, at that crate's optimisation level, and with it the whole
/// serving path (hyper's connections, the router's dispatch). The local stack's services
/// run as modes of `loadtest`, which the release profile builds at a lower level.
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: crate::Shutdown,
) -> io::Result<()> {
    let max_connections = within_open_file_limit(name, limits.max_connections).await;
    let admission = Arc::new(Semaphore::new(max_connections));
    let reports = Arc::new(LimitReports::new(name));
    let builder = connection_builder(&limits);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    reports.accept_failed.hit(&e);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = admission.clone().try_acquire_owned() else {
            reports
                .refused
                .hit(&format_args!("{max_connections} connections open"));
            continue;
        };
        // Answers are small and written at once: don't let Nagle's algorithm hold them.
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(FirstByteDeadline::new(stream, limits.header_read_timeout));
        let activity = Arc::new(Activity::new());
        let service = TowerToHyperService::new(Tracked {
            inner: app.clone(),
            activity: activity.clone(),
        });
        let connection = builder.serve_connection(io, service).into_owned();
        let watch = ConnectionWatch {
            activity,
            idle_limit: limits.header_read_timeout,
            stopping: stopping.clone(),
            reports: reports.clone(),
        };
        tokio::spawn(async move {
            watch.drive(connection).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection gives its slot back when it has finished.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_LIMIT, admission.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            server = name,
            "requests still in flight after {DRAIN_LIMIT:?}: closing them"
        );
    }
    Ok(())
}

/// What a connection is doing: requests in flight, and when the last one ended.
#[derive(Debug)]
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    last_end: Mutex<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            last_end: Mutex::new(Instant::now()),
        }
    }

    /// When the connection will have been idle for `limit` (later if a request runs).
    fn idle_at(&self, limit: Duration) -> Instant {
        let last = *self.last_end.lock().unwrap_or_else(|e| e.into_inner());
        if self.in_flight.load(Ordering::Acquire) > 0 {
            Instant::now() + limit
        } else {
            last + limit
        }
    }
}

/// The application, counting each request of one connection while it is served.
#[derive(Clone)]
struct Tracked {
    inner: axum::Router,
    activity: Arc<Activity>,
}

impl tower::Service<axum::extract::Request<hyper::body::Incoming>> for Tracked {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::<axum::extract::Request<hyper::body::Incoming>>::poll_ready(
            &mut self.inner,
            cx,
        )
    }

    fn call(&mut self, request: axum::extract::Request<hyper::body::Incoming>) -> Self::Future {
        self.activity.in_flight.fetch_add(1, Ordering::AcqRel);
        let answer = self.inner.call(request);
        let activity = self.activity.clone();
        Box::pin(async move {
            let response = answer.await;
            *activity.last_end.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
            activity.in_flight.fetch_sub(1, Ordering::AcqRel);
            response
        })
    }
}

/// One connection as [`serve`] serves it.
type Served = auto::Connection<
    'static,
    TokioIo<FirstByteDeadline>,
    TowerToHyperService<Tracked>,
    TokioExecutor,
>;

/// Drives one connection to its end, closing it gracefully (HTTP/2: GOAWAY) when it has
/// had no request for the idle limit, or when the server stops.
struct ConnectionWatch {
    activity: Arc<Activity>,
    idle_limit: Duration,
    stopping: tokio::sync::watch::Receiver<bool>,
    reports: Arc<LimitReports>,
}

impl ConnectionWatch {
    async fn drive(mut self, connection: Served) {
        let mut connection = std::pin::pin!(connection);
        let mut closing = false;
        loop {
            let idle_at = tokio::time::Instant::from_std(self.activity.idle_at(self.idle_limit));
            tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(e) = ended {
                        if is_timeout(e.as_ref()) {
                            self.reports.timed_out.hit(&format_args!(
                                "no complete request head within {:?}",
                                self.idle_limit
                            ));
                        }
                    }
                    return;
                }
                () = tokio::time::sleep_until(idle_at), if !closing => {
                    if tokio::time::Instant::now() >= tokio::time::Instant::from_std(self.activity.idle_at(self.idle_limit)) {
                        self.reports.timed_out.hit(&format_args!(
                            "no request for {:?}", self.idle_limit
                        ));
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
                _ = self.stopping.changed(), if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

fn is_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout)
            || e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// `wanted`, or half the process's open-file limit if that is lower (the rest is for
/// the server's own outgoing connections and files).
async fn within_open_file_limit(name: &'static str, wanted: usize) -> usize {
    let limit = tokio::task::spawn_blocking(|| {
        procfs::process::Process::myself()
            .and_then(|me| me.limits())
            .ok()
            .and_then(|limits| match limits.max_open_files.soft_limit {
                procfs::process::LimitValue::Value(n) => usize::try_from(n).ok(),
                procfs::process::LimitValue::Unlimited => None,
            })
    })
    .await
    .ok()
    .flatten();
    match limit {
        Some(open_files) if open_files / 2 < wanted => {
            let capped = (open_files / 2).max(1);
            tracing::warn!(
                server = name,
                "at most {capped} connections at once, not {wanted}: the open-file limit is {open_files} (ulimit -n)"
            );
            capped
        }
        _ => wanted,
    }
}

/// The limits' warnings, each at most once per [`WARN_EVERY`].
struct LimitReports {
    refused: RateLimitedWarning,
    timed_out: RateLimitedWarning,
    accept_failed: RateLimitedWarning,
}

impl LimitReports {
    fn new(server: &'static str) -> Self {
        let warning = |what| RateLimitedWarning::new(server, what);
        Self {
            refused: warning("connection limit reached: closed new connections"),
            timed_out: warning("closed slow or idle connections"),
            accept_failed: warning("could not accept connections"),
        }
    }
}

/// A warning logged at most once per [`WARN_EVERY`].
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// A warning that happens often when it happens at all: logged at most once every
/// [`WARN_EVERY`], with how many times it happened since the last line, so a storm of
/// them stays readable and costs nothing.
#[derive(Debug)]
pub struct RateLimitedWarning {
    server: &'static str,
    what: &'static str,
    since_last: AtomicU64,
    last: Mutex<Option<Instant>>,
}

impl RateLimitedWarning {
    pub fn new(server: &'static str, what: &'static str) -> Self {
        Self {
            server,
            what,
            since_last: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }

    /// Counts one more; logs `what (detail)` if the last line is old enough.
    pub fn hit(&self, detail: &dyn std::fmt::Display) {
        self.since_last.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let times = self.since_last.swap(0, Ordering::Relaxed);
        tracing::warn!(server = self.server, times, "{} ({detail})", self.what);
    }
}

/// A connection that must send its first byte before a deadline. Until then a read that
/// would wait past it fails with `TimedOut`; after it, reads and writes pass through.
struct FirstByteDeadline {
    stream: TcpStream,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl FirstByteDeadline {
    fn new(stream: TcpStream, within: Duration) -> Self {
        Self {
            stream,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
        }
    }
}

impl AsyncRead for FirstByteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        match (&read, self.deadline.as_mut()) {
            (Poll::Pending, Some(deadline)) => {
                if deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the connection sent nothing",
                    )));
                }
            }
            (Poll::Ready(_), Some(_)) => self.deadline = None,
            (_, None) => {}
        }
        read
    }
}

impl AsyncWrite for FirstByteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// How much a body's reservation in a [`BodyBudget`] grows at a time once it has its
/// first bytes.
pub const RESERVE_STEP: usize = 16 * 1024;

/// The request bodies a server holds at once: at most `total_bytes` over all requests,
/// each at most `max_body_bytes`, each arriving whole within `read_timeout`. A body's
/// bytes are reserved as they arrive and held until it is dropped, so a crowd of
/// unfinished bodies cannot grow the process, and a stalled one holds only what it sent
/// (at least 1 KiB): filling a 64 MiB budget with stalled bodies would take 65,536 of
/// them, more than [`serve`] lets in at once (1024 connections × 32 streams).
#[derive(Debug, Clone)]
pub struct BodyBudget {
    in_flight_kib: Arc<Semaphore>,
    max_body_bytes: usize,
    read_timeout: Duration,
}

/// Why a body was not read; [`BodyError::status`] is the HTTP status to answer.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("too many request bodies in flight: try again")]
    Busy,
    #[error("the body did not arrive within {within:?}")]
    TooSlow { within: Duration },
    #[error("the body could not be read: {0}")]
    Failed(String),
}

impl BodyError {
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Failed(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// A body read within a [`BodyBudget`]: its bytes stay reserved until this is dropped.
#[derive(Debug)]
pub struct BudgetedBody {
    pub bytes: axum::body::Bytes,
    /// `None` for a request that has no body (a GET): it reserves nothing.
    _reserved: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl BodyBudget {
    pub fn new(total_bytes: usize, max_body_bytes: usize, read_timeout: Duration) -> Self {
        let kib = |bytes: usize| bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        Self {
            in_flight_kib: Arc::new(Semaphore::new(kib(total_bytes.max(max_body_bytes)))),
            max_body_bytes,
            read_timeout,
        }
    }

    /// Reads `body` whole, reserving its bytes as they arrive (what it first sent, then
    /// in steps of [`RESERVE_STEP`]): a body that stalls holds only what it has sent, so a slow sender
    /// can block nobody but itself. A body's first bytes wait for room in the budget (up
    /// to the read timeout); a body that already holds bytes and finds no room for more
    /// is turned away at once ([`BodyError::Busy`]) rather than wait while holding them,
    /// so bodies never wait for each other. A body declared larger than the limit is
    /// refused before a byte is read; a request without a body reserves nothing.
    pub async fn read(
        &self,
        headers: &axum::http::HeaderMap,
        body: axum::body::Body,
    ) -> Result<BudgetedBody, BodyError> {
        use http_body_util::BodyExt as _;
        let declared = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        let limit = self.max_body_bytes;
        if declared.is_some_and(|n| n > limit) {
            return Err(BodyError::TooLarge { limit });
        }
        let within = self.read_timeout;
        let deadline = tokio::time::Instant::now() + within;
        let mut body = body;
        let mut bytes = Vec::with_capacity(declared.unwrap_or(0).min(RESERVE_STEP));
        let mut reserved: Option<tokio::sync::OwnedSemaphorePermit> = None;
        let mut reserved_bytes = 0;
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(BodyError::TooSlow { within }),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(BodyError::Failed(e.to_string())),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let total = bytes.len() + data.len();
            if total > limit {
                return Err(BodyError::TooLarge { limit });
            }
            if total > reserved_bytes {
                // A body's first reservation is what it sent (whole KiB); growth comes in
                // steps, to keep the semaphore out of the way of a fast body.
                let wanted = match reserved {
                    None => total,
                    Some(_) => total.next_multiple_of(RESERVE_STEP).min(limit.max(total)),
                };
                let kib =
                    u32::try_from((wanted - reserved_bytes).div_ceil(1024)).unwrap_or(u32::MAX);
                let more = match &reserved {
                    None => tokio::time::timeout_at(
                        deadline,
                        self.in_flight_kib.clone().acquire_many_owned(kib),
                    )
                    .await
                    .map_err(|_| BodyError::Busy)?
                    .map_err(|_| BodyError::Busy)?,
                    Some(_) => self
                        .in_flight_kib
                        .clone()
                        .try_acquire_many_owned(kib)
                        .map_err(|_| BodyError::Busy)?,
                };
                match &mut reserved {
                    Some(held) => held.merge(more),
                    None => reserved = Some(more),
                }
                reserved_bytes += kib as usize * 1024;
            }
            bytes.extend_from_slice(&data);
        }
        Ok(BudgetedBody {
            bytes: axum::body::Bytes::from(bytes),
            _reserved: reserved,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log lines written while `f` runs.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = lines.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn a_storm_of_warnings_is_one_line_with_its_count() {
        let warning = RateLimitedWarning::new("test-server", "something failed");
        let text = logged(|| {
            for i in 0..1000 {
                warning.hit(&format_args!("number {i}"));
            }
        });
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("WARN") && text.contains("something failed (number 0)"),
            "{text}"
        );
        // The next line, once due, counts the ones it stood for.
        *warning.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let text = logged(|| warning.hit(&"again"));
        assert!(text.contains("times=1000"), "{text}");
    }
}
