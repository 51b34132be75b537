//! A call dropped at any await point (a timeout around it, a caller that went away) must
//! not leave half an exchange on a connection that a later call borrows: each later call
//! gets its own answer, on connections the client keeps reusing.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Query;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use opentelemetry::Context;
use service_kit::client::{CallOutcome, TracedClient};
use service_kit::Telemetry;

mod common;

#[derive(serde::Deserialize)]
struct Echo {
    id: u32,
}

/// `/echo?id=N` answers `id=N` after 5 ms, its body in two chunks 5 ms apart, so a call
/// waits on the connection, the answer's head and the body; the count is of connections
/// accepted.
async fn slow_echo_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let app = Router::new().route(
        "/echo",
        get(|Query(echo): Query<Echo>| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let chunks = futures::stream::unfold(0u8, move |sent| async move {
                match sent {
                    0 => Some((Ok::<_, std::io::Error>(Bytes::from_static(b"id=")), 1)),
                    1 => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        Some((Ok(Bytes::from(echo.id.to_string())), 2))
                    }
                    _ => None,
                }
            });
            Body::from_stream(chunks)
        }),
    );
    common::serve_counting(move |stream| {
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        }
    })
    .await
}

/// Polls `call` until it has been pending `times` times, then drops it; `true` if it
/// finished before that.
async fn drop_at_pending<F: Future>(call: F, times: usize) -> bool {
    let mut call = pin!(call);
    let mut pending = 0;
    poll_fn(|cx| match call.as_mut().poll(cx) {
        Poll::Ready(_) => Poll::Ready(true),
        Poll::Pending => {
            pending += 1;
            if pending == times {
                Poll::Ready(false)
            } else {
                Poll::Pending
            }
        }
    })
    .await
}

async fn echo(client: &TracedClient, addr: SocketAddr, id: u32) -> CallOutcome {
    let uri = format!("http://{addr}/echo?id={id}").parse().expect("uri");
    client
        .get(&Context::new(), "GET echo", uri, Duration::from_secs(5))
        .await
}

/// Drops a call at its 1st, 2nd, … await point until one finishes; after each drop, two
/// calls must each read their own answer. Returns how many await points there were.
async fn sweep(client: &TracedClient, addr: SocketAddr, next_id: &mut u32) -> usize {
    for times in 1.. {
        *next_id += 1;
        if drop_at_pending(echo(client, addr, *next_id), times).await {
            return times - 1;
        }
        for _ in 0..2 {
            *next_id += 1;
            let outcome = echo(client, addr, *next_id).await;
            let CallOutcome::Response { status: 200, body } = outcome else {
                panic!("after a drop at await point {times}: {outcome:?}");
            };
            assert_eq!(
                body,
                Bytes::from(format!("id={next_id}")),
                "after a drop at await point {times}, a call read another call's answer"
            );
        }
    }
    unreachable!("`1..` has no end")
}

#[tokio::test]
async fn a_call_dropped_at_any_await_point_leaves_no_half_read_connection() {
    let (addr, accepted) = slow_echo_server().await;
    let mut id = 0;

    // Cold: the dropped calls connect; warm: they borrow a kept connection.
    let cold = TracedClient::new(Telemetry::disabled(), 8, 1 << 16);
    let cold_points = sweep(&cold, addr, &mut id).await;
    let warm = TracedClient::new(Telemetry::disabled(), 8, 1 << 16);
    id += 1;
    assert!(matches!(
        echo(&warm, addr, id).await,
        CallOutcome::Response { status: 200, .. }
    ));
    let warm_points = sweep(&warm, addr, &mut id).await;

    // Connecting, the answer's head and its second chunk are all awaited.
    assert!(cold_points >= 3, "only {cold_points} await points (cold)");
    assert!(warm_points >= 2, "only {warm_points} await points (warm)");
    // Each drop costs its connection (it may be mid-exchange); every call after it
    // reuses a kept one instead of connecting anew.
    let drops = cold_points + warm_points;
    let calls = id as usize;
    let connections = accepted.load(Ordering::SeqCst);
    assert!(
        connections <= drops + 4,
        "{connections} connections for {calls} calls and {drops} drops: kept connections are not reused"
    );
}
