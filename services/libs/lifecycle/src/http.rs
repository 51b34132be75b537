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
//!   (slowloris) and an idle keep-alive connection are both closed after it. A
//!   connection must send its first byte within the same time, which covers HTTP/2's
//!   preface; an HTTP/2 connection is then pinged at that interval and closed if it
//!   stops answering.
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
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// A server's connection limits (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 1024 connections (the local tuning run needs at most a few hundred), 30 s to send
    /// a request's headers (hyper's own default, which `axum::serve` leaves unset).
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(30),
        }
    }
}

/// After a failed `accept` (e.g. no file descriptor left), wait this long: retrying at
/// once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a stopping server waits for requests in flight.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// An HTTP/2 connection that does not answer a ping within this is closed.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then stops
/// accepting and lets requests in flight finish (for at most 30 s). `name` names the
/// server in log lines.
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let max_connections = within_open_file_limit(name, limits.max_connections).await;
    let admission = Arc::new(Semaphore::new(max_connections));
    let reports = Arc::new(LimitReports::new(name));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(PING_TIMEOUT);
    let graceful = GracefulShutdown::new();
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
        let connection = builder
            .serve_connection(io, TowerToHyperService::new(app.clone()))
            .into_owned();
        let connection = graceful.watch(connection);
        let reports = reports.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                if is_timeout(e.as_ref()) {
                    reports.timed_out.hit(&format_args!(
                        "no complete request head within {:?}",
                        limits.header_read_timeout
                    ));
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_LIMIT, graceful.shutdown())
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

/// The request bodies a server holds at once: at most `total_bytes` over all requests,
/// each at most `max_body_bytes`, each arriving whole within `read_timeout`. A body is
/// read only once its bytes are reserved, so a crowd of unfinished bodies cannot grow
/// the process: the ones beyond the budget wait (and give up after `read_timeout`).
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

    /// Reads `body` whole. Its `Content-Length` (from `headers`), or the size the
    /// protocol announces, is reserved first, or the largest allowed body when neither
    /// says; a request without a body reserves nothing.
    pub async fn read(
        &self,
        headers: &axum::http::HeaderMap,
        body: axum::body::Body,
    ) -> Result<BudgetedBody, BodyError> {
        use axum::body::HttpBody as _;
        let declared = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        let limit = self.max_body_bytes;
        if declared.is_some_and(|n| n > limit) {
            return Err(BodyError::TooLarge { limit });
        }
        // HTTP/1.1 without a length, or HTTP/2 whose headers end the stream: no body.
        let hint = body.size_hint();
        let expected = declared
            .or_else(|| hint.exact().and_then(|n| usize::try_from(n).ok()))
            .or_else(|| hint.upper().and_then(|n| usize::try_from(n).ok()))
            .unwrap_or(limit)
            .min(limit);
        let within = self.read_timeout;
        let deadline = tokio::time::Instant::now() + within;
        let reserved = if expected == 0 {
            None
        } else {
            let kib = u32::try_from(expected.div_ceil(1024)).unwrap_or(u32::MAX);
            let permit = tokio::time::timeout_at(
                deadline,
                self.in_flight_kib.clone().acquire_many_owned(kib),
            )
            .await
            .map_err(|_| BodyError::Busy)?
            .map_err(|_| BodyError::Busy)?;
            Some(permit)
        };
        // No more is read than was reserved.
        let bytes = tokio::time::timeout_at(deadline, axum::body::to_bytes(body, expected))
            .await
            .map_err(|_| BodyError::TooSlow { within })?
            .map_err(|e| {
                if std::error::Error::source(&e)
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                {
                    BodyError::TooLarge { limit }
                } else {
                    BodyError::Failed(e.to_string())
                }
            })?;
        Ok(BudgetedBody {
            bytes,
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
