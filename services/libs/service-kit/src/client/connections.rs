//! [`ConnectionSet`]: the keep-alive HTTP/1.1 connections a client holds to its origins,
//! built on hyper's connection-level API (`hyper::client::conn::http1`).
//!
//! No task of its own drives a connection. The request that borrows one polls it,
//! alongside its own work, from checkout until its answer's body has been read; only then
//! does the connection go back into the set. A pooled client with a task per connection
//! (hyper-util's) hands every request across a channel to that task and the answer back
//! across another, two task wake-ups per call that a gateway making three calls per
//! request pays on its hot path (`bench/run gateway`).
//!
//! Safe under cancellation by construction: a borrowed connection lives inside the
//! borrowing request's future. Dropped at any await point (a timeout, a client that went
//! away), the request drops the connection with it, which closes it; a connection with
//! half an exchange on it can never be lent again.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::uri::Authority;
use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustc_hash::FxHashMap;
use tokio::net::TcpStream;

type Driver = http1::Connection<TokioIo<TcpStream>, Empty<Bytes>>;

/// One HTTP/1.1 connection: the handle requests are sent through and the state machine
/// that does its I/O (`None` once it has finished: closed by the peer or failed).
pub(super) struct Connection {
    pub(super) sender: http1::SendRequest<Empty<Bytes>>,
    driver: Option<Driver>,
}

/// A connection waiting in the set, and since when. Boxed here and wherever it is lent:
/// hyper's connection state is ~700 bytes, which a call's future held by value,
/// alongside a second slot of that size the compiler left for it.
struct Idle {
    connection: Box<Connection>,
    since: Instant,
}

/// Why no connection could be had.
#[derive(Debug)]
pub(super) enum ConnectError {
    /// Refused, unreachable, or not made within the connect timeout.
    Connect(String),
    /// Connected, but HTTP/1.1 could not be set up on it.
    Handshake(String),
}

/// The idle connections to every origin a client calls, most recently used first.
#[derive(Debug)]
pub(super) struct ConnectionSet {
    /// Keyed by the origin as written (`Authority` hashes byte by byte, ignoring case,
    /// which cost more than the rest of a lookup): two spellings of one origin keep two
    /// sets, which only costs a connection. Hashed with Fx, not SipHash: the origins are
    /// the service's configured backends, not its callers' input, and a SipHash lookup
    /// cost ~230 instructions against Fx's ~20 (three calls per invoice, two lookups each).
    idle: Mutex<FxHashMap<Box<str>, Vec<Idle>>>,
    max_idle_per_origin: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").field("since", &self.since).finish()
    }
}

impl ConnectionSet {
    /// At most `max_idle_per_origin` idle connections are kept to each origin; one idle
    /// longer than `idle_timeout` is closed instead of lent.
    pub(super) fn new(
        max_idle_per_origin: usize,
        idle_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            idle: Mutex::new(FxHashMap::default()),
            max_idle_per_origin,
            idle_timeout,
            connect_timeout,
        }
    }

    /// A connection to `origin` ready for a request: an idle one if one is still open,
    /// else a new one. The flag says whether it was reused (a reused connection may have
    /// been closed by the peer just before the request went out).
    pub(super) async fn checkout(
        &self,
        origin: &Authority,
    ) -> Result<(Box<Connection>, bool), ConnectError> {
        while let Some(mut connection) = self.take_idle(origin) {
            if connection.ready().await {
                return Ok((connection, true));
            }
        }
        Ok((self.connect(origin).await?, false))
    }

    /// Puts back a connection whose exchange is complete (its answer's body read to the
    /// end), unless it is closing or the set for `origin` is full.
    pub(super) fn release(&self, origin: &Authority, connection: Box<Connection>) {
        if connection.driver.is_none() || connection.sender.is_closed() {
            return;
        }
        let entry = Idle {
            connection,
            since: Instant::now(),
        };
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        match idle.get_mut(origin.as_str()) {
            Some(waiting) => {
                if waiting.len() < self.max_idle_per_origin {
                    waiting.push(entry);
                }
            }
            None => {
                if self.max_idle_per_origin > 0 {
                    idle.insert(origin.as_str().into(), vec![entry]);
                }
            }
        }
    }

    /// The most recently used idle connection to `origin` not yet past the idle timeout;
    /// older ones are closed on the way (the set has no reaper task of its own).
    fn take_idle(&self, origin: &Authority) -> Option<Box<Connection>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting = idle.get_mut(origin.as_str())?;
        let fresh_from = waiting
            .iter()
            .position(|entry| entry.since.elapsed() < self.idle_timeout)
            .unwrap_or(waiting.len());
        waiting.drain(..fresh_from);
        waiting.pop().map(|entry| entry.connection)
    }

    async fn connect(&self, origin: &Authority) -> Result<Box<Connection>, ConnectError> {
        // `[::1]` in a URI is `::1` to the resolver.
        let host = origin.host().trim_start_matches('[').trim_end_matches(']');
        let port = origin.port_u16().unwrap_or(80);
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| {
                ConnectError::Connect(format!(
                    "no connection to {origin} within {} ms",
                    self.connect_timeout.as_millis()
                ))
            })?
            .map_err(|e| ConnectError::Connect(format!("connecting to {origin}: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| ConnectError::Connect(format!("connecting to {origin}: {e}")))?;
        let (sender, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ConnectError::Handshake(super::describe(&e)))?;
        Ok(Box::new(Connection {
            sender,
            driver: Some(driver),
        }))
    }
}

impl Connection {
    /// Runs `work` (sending on this connection, reading its answer's body) while driving
    /// the connection's I/O in the same task. Should the connection finish first, `work`
    /// goes on alone and learns why from hyper (its request or body fails).
    pub(super) async fn drive<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = pin!(work);
        poll_fn(|cx| {
            self.poll_driver(cx);
            work.as_mut().poll(cx)
        })
        .await
    }

    /// Whether an idle connection can take a request now: driving it once lets it notice
    /// a close by the peer and get ready for the next exchange, which hyper does at once
    /// on a connection whose last answer was read to the end.
    async fn ready(&mut self) -> bool {
        poll_fn(|cx| {
            self.poll_driver(cx);
            let ready =
                self.driver.is_some() && matches!(self.sender.poll_ready(cx), Poll::Ready(Ok(())));
            Poll::Ready(ready)
        })
        .await
    }

    fn poll_driver(&mut self, cx: &mut Context<'_>) {
        if let Some(driver) = self.driver.as_mut() {
            if Pin::new(driver).poll(cx).is_ready() {
                self.driver = None;
            }
        }
    }
}
