//! Keep-alive HTTP/1.1 connections driven inside the task that sends on them: one per
//! closed-loop user and one per open-loop lane.
//!
//! A pooled client such as hyper-util's runs every connection as a task of its own: each
//! request crosses a channel to that task and its answer crosses back, two task wake-ups
//! per request. Polling the connection beside the
//! request in the sender's task removes both (wrk's model: one connection per user, one
//! event loop); `bench/run loadgen` measures the difference.

use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper::header::{HeaderValue, HOST};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// How long a connect may take before the request counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

type Io = TokioIo<TcpStream>;

/// A connection's I/O state machine, boxed: hyper's is several hundred bytes, and a
/// lane's future holds it across every await.
type Driver = Pin<Box<Connection<Io, Empty<Bytes>>>>;

/// What came back for one request, or why nothing did.
#[derive(Debug)]
pub enum Reply {
    Response {
        status: u16,
        body: Bytes,
    },
    /// No connection could be made: refused, unreachable, or none within 2 s.
    ConnectFailed(String),
    TimedOut,
    /// The connection failed after it was made (reset, or closed before an answer).
    Failed(String),
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
    open: Option<Open>,
    /// The requests' timeout, one timer for all of them: moving a pending timer's
    /// deadline later is an atomic update in Tokio, whereas a timer per request is an
    /// insertion into the timer wheel and a removal from it.
    timer: Option<Pin<Box<Sleep>>>,
}

struct Open {
    sender: SendRequest<Empty<Bytes>>,
    /// `None` once it has finished. Dropped then, not kept: a request still queued on it
    /// is handed back only when it is dropped, and would otherwise wait for its timeout.
    connection: Option<Driver>,
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
    /// Nothing is connected until the first request.
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            open: None,
            timer: None,
        }
    }

    /// `GET path_and_query` (an origin-form URI), giving up after `timeout`. After a
    /// timeout or failure the connection is closed: its state is unknown.
    pub async fn get(&mut self, path_and_query: Uri, timeout: Duration) -> Reply {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timer = match self.timer.take() {
            Some(mut timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        };
        // Pinned here, for this statement only: moved into `until_timer`, the request's
        // future was copied once more a request.
        let outcome = until_timer(std::pin::pin!(self.send(path_and_query)), timer.as_mut()).await;
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
            let (outcome, finished) = match open.exchange(request).await {
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
            return outcome;
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
        Ok(Open {
            sender,
            connection: Some(Box::pin(connection)),
        })
    }
}

/// `work`'s outcome, or [`Reply::TimedOut`] once `timer` fires first.
///
/// A timer wakes the waker it was last polled with, so it is polled again only for a new
/// one: each poll of a Tokio timer re-registers the waker (two reference counts and an
/// atomic swap), and a request's task is polled about twice. In between, whether it
/// fired is read off the timer.
async fn until_timer(
    mut work: Pin<&mut impl Future<Output = Reply>>,
    mut timer: Pin<&mut Sleep>,
) -> Reply {
    let mut registered: Option<Waker> = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(outcome) = work.as_mut().poll(cx) {
            return Poll::Ready(outcome);
        }
        if registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return if timer.is_elapsed() {
                Poll::Ready(Reply::TimedOut)
            } else {
                Poll::Pending
            };
        }
        registered = Some(cx.waker().clone());
        timer.as_mut().poll(cx).map(|()| Reply::TimedOut)
    })
    .await
}

impl Open {
    /// Sends `request` and reads its answer, driving the connection alongside.
    async fn exchange(&mut self, request: Request<Empty<Bytes>>) -> Exchange {
        let Open { sender, connection } = self;
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
            match response.into_body().collect().await {
                Ok(body) => Ok(Reply::Response {
                    status,
                    body: body.to_bytes(),
                }),
                Err(e) => Err(failed(&e)),
            }
        };
        match drive(connection, answer).await {
            Ok(outcome) => Exchange::Done {
                outcome,
                // Closed after its answer (`Connection: close`), say.
                finished: connection.is_none(),
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

/// Runs `work` while polling `connection` (whose I/O makes progress only while polled)
/// in the same task. Once the connection finishes it is dropped and `work` goes on
/// alone: hyper fails or hands back what was waiting on it.
///
/// `work` is polled first: what it hands the connection (a request, a read of the body)
/// is then taken up in the same poll, not in one more wake-up of the task.
async fn drive<F: Future>(connection: &mut Option<Driver>, work: F) -> F::Output {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        match connection.as_mut().map(|open| open.as_mut().poll(cx)) {
            Some(Poll::Ready(_)) => {
                *connection = None;
                work.as_mut().poll(cx)
            }
            _ => Poll::Pending,
        }
    })
    .await
}
