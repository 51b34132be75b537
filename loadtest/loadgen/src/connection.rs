//! Keep-alive HTTP/1.1 connections, one per closed-loop user and one per open-loop lane
//! (wrk's model: a connection per user, requests on it one after another).
//!
//! Each connection's I/O runs in a task of its own, as hyper's examples run it; the
//! user's task sends on it and reads the answer. Polling the connection inside the
//! user's task instead saves the hand-over between two tasks, but against the instant
//! nginx endpoint on one core it answered 6–7 % fewer requests a second, in user and
//! in kernel time alike, for about as many instructions (docs/performance.md,
//! 2026-12-05).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Body as _;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, HOST};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// How long a connect may take before the request counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What came back for one request, or why nothing did.
#[derive(Debug)]
pub enum Reply {
    Response {
        status: u16,
        /// Whether the body held the connection's marker (read as it came, not kept).
        marked: bool,
    },
    /// No connection could be made: refused, unreachable, or none within 2 s.
    ConnectFailed(String),
    TimedOut,
    /// The connection failed after it was made (reset, or closed before an answer).
    Failed(String),
    /// A connection made for this request failed before its answer was complete (closed
    /// or reset): all a server that accepts connections and serves nothing gives.
    ClosedUnanswered(String),
}

impl Reply {
    /// Whether the target could not be reached or served nothing on a new connection:
    /// a closed-loop user pauses before its next try rather than hammer it.
    pub fn is_target_unavailable(&self) -> bool {
        matches!(self, Reply::ConnectFailed(_) | Reply::ClosedUnanswered(_))
    }
}

/// An error with its causes, `outer: inner: innermost` (hyper's own messages are terse).
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let chain = std::iter::successors(Some(error), |e| e.source());
    chain
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// Where a user connects: a URL's host and port, and its `Host` header.
#[derive(Clone, Debug)]
pub struct Endpoint {
    host: String,
    port: u16,
    host_header: HeaderValue,
}

impl Endpoint {
    /// The host and port of an `http://` URL.
    pub fn of(url: &url::Url) -> Result<Self, String> {
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Err(format!("{url} has no host and port to connect to"));
        };
        let host_header =
            HeaderValue::try_from(format!("{host}:{port}")).map_err(|e| format!("{url}: {e}"))?;
        Ok(Self {
            // An IPv6 host is bracketed in a URL and a `Host` header, not in a connect.
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            host_header,
        })
    }
}

impl Endpoint {
    /// Connects once and closes again: whether anything listens there.
    pub async fn check_reachable(&self) -> Result<(), String> {
        let where_ = format!("{}:{}", self.host, self.port);
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("nothing answers at {where_}: {e}")),
            Err(_) => Err(format!(
                "nothing answers at {where_}: no connection within {CONNECT_TIMEOUT:?}"
            )),
        }
    }
}

/// A lazily opened connection to one endpoint, reopened after any failure.
pub struct UserConnection {
    endpoint: Endpoint,
    /// What to look for in each answer's body, if anything.
    marker: Option<&'static [u8]>,
    open: Option<Open>,
    /// The requests' timeout, one timer for all of them (see [`RequestTimer`]).
    timer: Option<RequestTimer>,
}

/// One timer for a connection's requests, set lazily: a request whose deadline is later
/// than the timer's (every request but a run's last few) leaves it as it is; when it
/// fires before the request's deadline, it is set to that deadline and waited on again.
/// It fires at most once a timeout. Set for each request (an atomic update of its
/// deadline in Tokio) and polled once with the request's task, it took 0.4k of the
/// generator's 18.1k instructions a request against an instant endpoint.
struct RequestTimer {
    sleep: Pin<Box<Sleep>>,
    /// The waker it was last polled with, which it wakes when it fires: polling a Tokio
    /// timer re-registers the waker (two reference counts and an atomic swap), so it is
    /// polled again only for another waker or once it has fired.
    polled_with: Option<Waker>,
}

impl RequestTimer {
    /// A timer that fires at `deadline` or before.
    fn new(deadline: Instant) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            polled_with: None,
        }
    }

    /// Brings the timer forward to `deadline` if it is set later: it must not fire
    /// after the request's deadline.
    fn not_after(&mut self, deadline: Instant) {
        if self.sleep.deadline() > deadline {
            self.sleep.as_mut().reset(deadline);
            self.polled_with = None;
        }
    }

    /// Ready once `deadline` (which is not before the timer's) has passed.
    fn poll_past(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let registered = self
            .polled_with
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()));
        if registered && !self.sleep.is_elapsed() {
            return Poll::Pending;
        }
        // At most twice round: once more after a timer that fired at an earlier
        // request's deadline is set to this one's.
        loop {
            if self.sleep.is_elapsed() {
                if self.sleep.deadline() >= deadline {
                    return Poll::Ready(());
                }
                self.sleep.as_mut().reset(deadline);
            }
            self.polled_with = Some(cx.waker().clone());
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

/// The sending half of a connection whose I/O runs in a task of its own. Dropping it
/// ends that task: hyper closes a connection once nobody can send on it, and one whose
/// answer nobody waits for any more (a request that timed out), so no connection
/// outlives its user with a request half read.
struct Open {
    sender: SendRequest<Empty<Bytes>>,
}

/// What became of a request given to a connection.
enum Exchange {
    /// Answered, or failed once it may have gone out; `finished` says the connection
    /// takes no more requests.
    Done { outcome: Reply, finished: bool },
    /// The connection closed before the request went out.
    Unsent(Request<Empty<Bytes>>),
}

impl UserConnection {
    /// Nothing is connected until the first request. Answers' bodies are searched for
    /// `marker` (see [`Reply::Response`]) as they are read, and dropped.
    pub fn new(endpoint: Endpoint, marker: Option<&'static [u8]>) -> Self {
        Self {
            endpoint,
            marker: marker.filter(|m| !m.is_empty()),
            open: None,
            timer: None,
        }
    }

    /// `GET path_and_query` (an origin-form URI), giving up at `deadline`. After a
    /// timeout or failure the connection is closed: its state is unknown.
    pub async fn get(&mut self, path_and_query: Uri, deadline: std::time::Instant) -> Reply {
        let deadline = Instant::from_std(deadline);
        let mut timer = match self.timer.take() {
            Some(mut timer) => {
                timer.not_after(deadline);
                timer
            }
            None => RequestTimer::new(deadline),
        };
        // Pinned here, for this statement only: moved into `until_deadline`, the
        // request's future was copied once more a request.
        let outcome = until_deadline(
            std::pin::pin!(self.send(path_and_query)),
            &mut timer,
            deadline,
        )
        .await;
        self.timer = Some(timer);
        if !matches!(outcome, Reply::Response { .. }) {
            self.open = None;
        }
        outcome
    }

    async fn send(&mut self, path_and_query: Uri) -> Reply {
        // Set in place: `Request::builder` moves the request's parts at every step.
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = path_and_query;
        request
            .headers_mut()
            .insert(HOST, self.endpoint.host_header.clone());
        // A kept-alive connection the server closed while it was idle hands the request
        // back unsent; it goes once more, on a new connection. (A request that went out
        // before the close was noticed is not repeated: it may have been served.)
        let mut reused = true;
        loop {
            let open = match self.open.take() {
                Some(open) if !open.sender.is_closed() => self.open.insert(open),
                _ => match self.connect().await {
                    Ok(open) => {
                        reused = false;
                        self.open.insert(open)
                    }
                    Err(outcome) => return outcome,
                },
            };
            let (outcome, finished) = match open.exchange(request, self.marker).await {
                Exchange::Done { outcome, finished } => (outcome, finished),
                Exchange::Unsent(unsent) if reused => {
                    self.open = None;
                    request = unsent;
                    reused = false;
                    continue;
                }
                Exchange::Unsent(_) => (
                    Reply::Failed("the connection closed before the request went out".into()),
                    true,
                ),
            };
            if finished {
                // A finished connection takes no more requests: the next one opens a new one.
                self.open = None;
            }
            return match outcome {
                Reply::Failed(why) if !reused => Reply::ClosedUnanswered(why),
                outcome => outcome,
            };
        }
    }

    async fn connect(&self) -> Result<Open, Reply> {
        let connect = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port));
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(Reply::ConnectFailed(describe(&e))),
            Err(_) => {
                return Err(Reply::ConnectFailed(format!(
                    "no connection within {CONNECT_TIMEOUT:?}"
                )))
            }
        };
        // Requests are small and answered at once: don't let Nagle hold them back.
        stream
            .set_nodelay(true)
            .map_err(|e| Reply::ConnectFailed(describe(&e)))?;
        // A request is one buffer (no body), so it goes out in a `send`: a `writev` of
        // one buffer took 3 % more kernel time a request (14 of 17 alternating rounds).
        let (sender, connection) = http1::Builder::new()
            .writev(false)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Reply::ConnectFailed(describe(&e)))?;
        // Its errors reach the request waiting on it; the task has nothing to add.
        tokio::spawn(connection);
        Ok(Open { sender })
    }
}

/// `work`'s outcome, or [`Reply::TimedOut`] once `deadline` has passed first.
async fn until_deadline(
    mut work: Pin<&mut impl Future<Output = Reply>>,
    timer: &mut RequestTimer,
    deadline: Instant,
) -> Reply {
    std::future::poll_fn(|cx| {
        if let Poll::Ready(outcome) = work.as_mut().poll(cx) {
            return Poll::Ready(outcome);
        }
        timer.poll_past(cx, deadline).map(|()| Reply::TimedOut)
    })
    .await
}

impl Open {
    /// Sends `request` and reads its answer; hands the request back if the connection
    /// closed before it went out.
    async fn exchange(
        &mut self,
        request: Request<Empty<Bytes>>,
        marker: Option<&'static [u8]>,
    ) -> Exchange {
        let sender = &mut self.sender;
        let answer = async {
            // Until the connection has read its last answer to the end it takes no
            // request; it learns that it has only while it is polled.
            if sender.ready().await.is_err() {
                return Err(Exchange::Unsent(request));
            }
            let response = match sender.try_send_request(request).await {
                Ok(response) => response,
                Err(mut refused) => {
                    return match refused.take_message() {
                        Some(unsent) => Err(Exchange::Unsent(unsent)),
                        None => Err(failed(&refused.into_error())),
                    }
                }
            };
            let status = response.status().as_u16();
            let mut body = response.into_body();
            let mut scan = MarkerScan::new(marker);
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => {
                        if let Some(data) = frame.data_ref() {
                            scan.feed(data, body.is_end_stream());
                        }
                    }
                    Err(e) => return Err(failed(&e)),
                }
            }
            Ok(Reply::Response {
                status,
                marked: scan.found,
            })
        };
        match answer.await {
            Ok(outcome) => Exchange::Done {
                outcome,
                // Closed after its answer (`Connection: close`), say. If its task has
                // not seen that yet, the next request finds out and is handed back.
                finished: sender.is_closed(),
            },
            Err(exchange) => exchange,
        }
    }
}

fn failed(error: &hyper::Error) -> Exchange {
    Exchange::Done {
        outcome: Reply::Failed(describe(error)),
        finished: true,
    }
}

/// Looks for a marker in a body read frame by frame, holding no more of the body than a
/// marker's length: a large answer is classified without being kept whole.
struct MarkerScan {
    marker: Option<&'static [u8]>,
    found: bool,
    /// The body's last `marker.len() - 1` bytes so far: a marker may span two frames.
    tail: Vec<u8>,
}

impl MarkerScan {
    fn new(marker: Option<&'static [u8]>) -> Self {
        Self {
            marker,
            found: false,
            tail: Vec::new(),
        }
    }

    /// Takes the body's next frame of data; `last` when no more will come.
    fn feed(&mut self, data: &[u8], last: bool) {
        let Some(marker) = self.marker.filter(|_| !self.found) else {
            return;
        };
        let keep = marker.len() - 1;
        if !self.tail.is_empty() {
            let seen = self.tail.len();
            self.tail.extend_from_slice(&data[..keep.min(data.len())]);
            self.found = contains(&self.tail, marker);
            self.tail.truncate(seen);
        }
        self.found = self.found || contains(data, marker);
        // The last frame (most bodies have one) needs no tail: nothing follows it.
        if self.found || last {
            return;
        }
        self.tail.extend_from_slice(data);
        let excess = self.tail.len().saturating_sub(keep);
        self.tail.drain(..excess);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::MarkerScan;

    const MARKER: &[u8] = b"\"partial\":true";

    /// Whether the scan finds the marker in `body` cut into frames at `cuts`.
    fn found_in(body: &[u8], cuts: &[usize]) -> bool {
        let mut scan = MarkerScan::new(Some(MARKER));
        let mut from = 0;
        for &to in cuts.iter().chain([&body.len()]) {
            scan.feed(&body[from..to], to == body.len());
            from = to;
        }
        scan.found
    }

    #[test]
    fn a_marker_is_found_however_the_body_is_cut_into_frames() {
        let marked = br#"{"errors":["packages"],"partial":true}"#;
        let whole = br#"{"errors":[],"partial":false}"#;
        // Every way of cutting the body in three, empty frames included.
        for first in 0..=marked.len() {
            for second in first..=marked.len() {
                assert!(found_in(marked, &[first, second]), "{first} {second}");
            }
        }
        for first in 0..=whole.len() {
            for second in first..=whole.len() {
                assert!(!found_in(whole, &[first, second]), "{first} {second}");
            }
        }
        // One byte a frame: the marker spans fourteen of them.
        let bytes: Vec<usize> = (1..marked.len()).collect();
        assert!(found_in(marked, &bytes));
        // The frames' ends around a marker that is not there.
        assert!(!found_in(br#""partial":tru"#, &[5]));
        assert!(found_in(br#"x"partial":true"#, &[1, 15]));
    }

    #[test]
    fn a_long_body_leaves_no_more_than_a_marker_behind() {
        let mut scan = MarkerScan::new(Some(MARKER));
        let frame = [b'x'; 4096];
        for _ in 0..1000 {
            scan.feed(&frame, false);
        }
        assert!(!scan.found);
        assert_eq!(scan.tail.len(), MARKER.len() - 1);
    }

    #[test]
    fn without_a_marker_nothing_is_found_or_kept() {
        let mut scan = MarkerScan::new(None);
        scan.feed(MARKER, false);
        assert!(!scan.found);
        assert!(scan.tail.is_empty());
    }
}
