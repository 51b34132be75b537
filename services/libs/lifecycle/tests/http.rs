//! `lifecycle::http::serve` against real sockets: silent, slow and excess connections
//! are closed, and a client that behaves is still served.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lifecycle::http::{serve, ConnectionLimits, Http2Flow};

const LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 4,
    header_read_timeout: Duration::from_millis(500),
    http2_flow: Http2Flow::SMALL,
};

/// A log writer the test can read back.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Serves a one-route app within [`LIMITS`] on its own runtime thread.
fn start(logs: Logs) -> SocketAddr {
    start_app(
        logs,
        axum::Router::new().route("/", axum::routing::get(|| async { "hello" })),
    )
}

/// Serves `app` within [`LIMITS`] on its own runtime thread, logging into `logs`.
fn start_app(logs: Logs, app: axum::Router) -> SocketAddr {
    start_within(logs, app, LIMITS)
}

/// Serves `app` within `limits` on its own runtime thread, logging into `logs`.
fn start_within(logs: Logs, app: axum::Router, limits: ConnectionLimits) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = serve(
                "test-server",
                listener,
                app,
                limits,
                Box::pin(std::future::pending()),
            )
            .await;
        });
    });
    addr
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
}

/// True once the server has closed `stream` (EOF or reset), within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).expect("read timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn get(addr: SocketAddr) -> String {
    let mut stream = connect(addr);
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .expect("request");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

#[test]
fn silent_slow_and_excess_connections_are_closed_and_logged() {
    let logs = Logs::default();
    let addr = start(logs.clone());
    assert!(get(addr).ends_with("hello"), "serves a normal request");

    let started = Instant::now();
    let mut silent = connect(addr);
    let mut slow = connect(addr);
    slow.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
        .expect("part of a head");
    let mut idle = connect(addr);
    idle.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("a request");
    let mut answer = [0u8; 256];
    assert!(
        idle.read(&mut answer).expect("answer") > 0,
        "answered, then kept alive"
    );
    let mut fourth = connect(addr);

    // The limit is 4: a fifth connection is closed as it arrives.
    let mut excess = connect(addr);
    assert!(
        closed_within(&mut excess, Duration::from_secs(5)),
        "excess connection closed"
    );
    assert!(
        started.elapsed() < LIMITS.header_read_timeout,
        "closed at once, not timed out"
    );

    // The silent, the slow and the idle keep-alive connection are closed after the
    // header read timeout, not before.
    for (name, stream) in [
        ("silent", &mut silent),
        ("slow", &mut slow),
        ("idle", &mut idle),
        ("fourth", &mut fourth),
    ] {
        assert!(
            closed_within(stream, Duration::from_secs(5)),
            "{name} connection closed"
        );
    }
    assert!(
        started.elapsed() >= LIMITS.header_read_timeout,
        "{:?}",
        started.elapsed()
    );

    // Their slots are free again.
    assert!(
        get(addr).ends_with("hello"),
        "serves again once they are gone"
    );
    let logs = logs.text();
    assert!(logs.contains("connection limit reached"), "{logs}");
    assert!(logs.contains("closed slow or idle connections"), "{logs}");
}

/// The settings an HTTP/2 server announces in its first frame, as (identifier, value)
/// pairs, read off the raw connection after the client's preface.
fn announced_http2_settings(addr: SocketAddr) -> Vec<(u16, u32)> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    const EMPTY_SETTINGS: [u8; 9] = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    let mut stream = connect(addr);
    stream.write_all(PREFACE).expect("preface");
    stream.write_all(&EMPTY_SETTINGS).expect("settings");
    let mut header = [0u8; 9];
    stream
        .read_exact(&mut header)
        .expect("the server's first frame");
    assert_eq!(header[3], 0x4, "the server's first frame is SETTINGS");
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; length];
    stream.read_exact(&mut payload).expect("the settings");
    payload
        .chunks_exact(6)
        .map(|entry| {
            (
                u16::from_be_bytes([entry[0], entry[1]]),
                u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]),
            )
        })
        .collect()
}

#[test]
fn a_server_announces_the_frames_and_stream_window_its_peers_may_send() {
    const INITIAL_WINDOW_SIZE: u16 = 0x4;
    const MAX_FRAME_SIZE: u16 = 0x5;
    for flow in [Http2Flow::SMALL, Http2Flow::BATCHES] {
        let limits = ConnectionLimits {
            http2_flow: flow,
            ..LIMITS
        };
        let addr = start_within(Logs::default(), axum::Router::new(), limits);
        let settings = announced_http2_settings(addr);
        let announced = |id| {
            settings
                .iter()
                .rev()
                .find(|(setting, _)| *setting == id)
                .map(|(_, value)| *value)
        };
        // What a server leaves out keeps HTTP/2's initial value (RFC 9113, 6.5.2).
        assert_eq!(
            announced(MAX_FRAME_SIZE).unwrap_or(16_384),
            flow.max_frame(),
            "{flow:?}: {settings:?}"
        );
        assert_eq!(
            announced(INITIAL_WINDOW_SIZE).unwrap_or(65_535),
            flow.stream_window(),
            "{flow:?}: {settings:?}"
        );
    }
}

mod body_budget {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{HeaderMap, HeaderValue};
    use lifecycle::http::{BodyBudget, BodyError};

    fn declaring(length: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from(length));
        headers
    }

    /// A body that sends `first` and then nothing more.
    fn stalled(first: &'static [u8]) -> Body {
        let chunks = futures::stream::iter([Ok::<_, std::io::Error>(first)])
            .chain(futures::stream::pending());
        Body::from_stream(chunks)
    }

    use futures::StreamExt as _;

    #[tokio::test]
    async fn bodies_are_read_within_their_size_time_and_the_bytes_in_flight() {
        let budget = BodyBudget::new(64 * 1024, 32 * 1024, Duration::from_millis(300));
        let read = budget
            .read(&declaring(5), Body::from("hello"))
            .await
            .expect("a small body is read");
        assert_eq!(&read.bytes[..], b"hello");

        // Declared too large: refused before a byte is read.
        let too_large = budget.read(&declaring(40 * 1024), stalled(b"x")).await;
        assert!(
            matches!(too_large, Err(BodyError::TooLarge { limit: 32768 })),
            "{too_large:?}"
        );
        // Undeclared and too large: refused once past the limit.
        let big = Body::from(vec![0u8; 40 * 1024]);
        let too_large = budget.read(&HeaderMap::new(), big).await;
        assert!(
            matches!(too_large, Err(BodyError::TooLarge { .. })),
            "{too_large:?}"
        );

        // Bodies that stall hold only what they sent: a crowd of them leaves room, and
        // another body is read while they still wait.
        drop(read);
        let patience = Duration::from_secs(5);
        let patient = BodyBudget::new(64 * 1024, 32 * 1024, patience);
        let started = std::time::Instant::now();
        let half = declaring(32 * 1024);
        let stalled_bodies: Vec<_> = (0..16)
            .map(|_| patient.read(&half, stalled(b"a")))
            .collect();
        let stalled_bodies = futures::future::join_all(stalled_bodies);
        let another = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            patient.read(&declaring(10), Body::from("0123456789")).await
        };
        tokio::pin!(stalled_bodies);
        tokio::select! {
            read = another => {
                assert!(read.is_ok(), "{read:?}");
                assert!(started.elapsed() < patience, "it did not wait for them to time out");
            }
            _ = &mut stalled_bodies => panic!("the stalled bodies ended first: the other body waited for them"),
        }

        // Bodies read but still held (their requests being served) keep their bytes: a
        // new body is turned away once it has waited its time.
        let held = [
            budget
                .read(&declaring(30 * 1024), Body::from(vec![1u8; 30 * 1024]))
                .await,
            budget
                .read(&declaring(30 * 1024), Body::from(vec![1u8; 30 * 1024]))
                .await,
        ];
        assert!(held.iter().all(Result::is_ok), "{held:?}");
        let turned_away = budget
            .read(&declaring(10 * 1024), Body::from(vec![2u8; 10 * 1024]))
            .await;
        assert!(
            matches!(turned_away, Err(BodyError::Busy)),
            "{turned_away:?}"
        );
        drop(held);
        let again = budget.read(&declaring(10), Body::from("0123456789")).await;
        assert!(again.is_ok(), "{again:?}");
    }
}

mod bodiless {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::HeaderMap;
    use lifecycle::http::BodyBudget;

    /// Requests without a body (GETs) reserve nothing: any number of them are served
    /// while bodies hold the whole budget.
    #[tokio::test]
    async fn requests_without_a_body_reserve_nothing() {
        let budget = BodyBudget::new(32 * 1024, 32 * 1024, Duration::from_millis(200));
        let mut headers = HeaderMap::new();
        headers.insert("content-length", 32_768.into());
        let held = budget
            .read(&headers, Body::from(vec![0u8; 32 * 1024]))
            .await
            .expect("the whole budget");
        for _ in 0..100 {
            let empty = budget.read(&HeaderMap::new(), Body::empty()).await;
            assert!(empty.is_ok_and(|b| b.bytes.is_empty()));
        }
        drop(held);
    }
}

mod http2 {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use axum::body::Body;
    use axum::extract::State;
    use axum::http::{HeaderMap, Request, StatusCode};
    use futures::StreamExt as _;
    use http_body_util::BodyExt as _;
    use hyper::client::conn::http2::SendRequest;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use lifecycle::http::BodyBudget;

    use super::{start, start_app, start_within, Logs, LIMITS};

    /// An HTTP/2 connection (prior knowledge) and the task driving it, which ends when
    /// the server closes the connection.
    async fn connect(addr: SocketAddr) -> (SendRequest<Body>, tokio::task::JoinHandle<()>) {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tcp))
            .await
            .expect("HTTP/2 handshake");
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        (send, driver)
    }

    async fn text(response: hyper::Response<hyper::body::Incoming>) -> (StatusCode, String) {
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn idle_http2_connections_are_closed_like_http1_ones() {
        let logs = Logs::default();
        let addr = start(logs.clone());
        let (mut send, driver) = connect(addr).await;
        let request = Request::get("http://x/")
            .body(Body::empty())
            .expect("request");
        let answer = send.send_request(request).await.expect("answer");
        assert_eq!(text(answer).await, (StatusCode::OK, "hello".into()));
        // The client answers the server's pings; the connection is closed anyway once it
        // has had no request for the idle limit.
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), driver)
            .await
            .expect("the idle HTTP/2 connection was closed")
            .expect("driver");
        assert!(
            started.elapsed() >= LIMITS.header_read_timeout / 2,
            "closed as idle, not at once: {:?}",
            started.elapsed()
        );
        assert!(logs.text().contains("closed slow or idle connections"));
    }

    /// Reads the body within a 64 KiB budget (32 KiB per body, 5 s to arrive) and
    /// answers its length.
    async fn budgeted(
        State(budget): State<BodyBudget>,
        headers: HeaderMap,
        body: Body,
    ) -> (StatusCode, String) {
        match budget.read(&headers, body).await {
            Ok(read) => (StatusCode::OK, read.bytes.len().to_string()),
            Err(e) => (e.status(), e.to_string()),
        }
    }

    #[tokio::test]
    async fn stalled_http2_streams_block_only_themselves() {
        let budget = BodyBudget::new(64 * 1024, 32 * 1024, Duration::from_secs(5));
        let app = axum::Router::new()
            .route("/body", axum::routing::post(budgeted))
            .with_state(budget);
        let addr = start_app(Logs::default(), app);

        // Sixteen streams on one connection send one byte each, no length, and stall.
        let (stalling, _stalling_driver) = connect(addr).await;
        let stalled: Vec<_> = (0..16)
            .map(|_| {
                let mut send = stalling.clone();
                let body = futures::stream::iter([Ok::<_, std::io::Error>(&b"x"[..])])
                    .chain(futures::stream::pending());
                let request = Request::post("http://x/body")
                    .body(Body::from_stream(body))
                    .expect("request");
                tokio::spawn(async move { send.send_request(request).await.map(|r| r.status()) })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;

        // Another client's body is read at once, while they still wait.
        let started = Instant::now();
        let (mut send, _driver) = connect(addr).await;
        let request = Request::post("http://x/body")
            .header("content-length", "10")
            .body(Body::from("0123456789"))
            .expect("request");
        let answer = send.send_request(request).await.expect("answer");
        assert_eq!(text(answer).await, (StatusCode::OK, "10".into()));
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        assert!(
            stalled.iter().all(|task| !task.is_finished()),
            "the stalled streams are still waiting"
        );
        for task in stalled {
            let status = task.await.expect("task").expect("an answer");
            assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
        }
    }

    /// Answers the length of the body once `release` is notified, not reading it before.
    async fn read_when_released(
        State(release): State<std::sync::Arc<tokio::sync::Notify>>,
        body: Body,
    ) -> String {
        release.notified().await;
        let read = body.collect().await.map(|b| b.to_bytes().len());
        read.map_or_else(|e| e.to_string(), |length| length.to_string())
    }

    #[tokio::test]
    async fn a_stream_sends_its_window_ahead_of_the_servers_reading_and_no_more() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        use lifecycle::http::{ConnectionLimits, Http2Flow};

        const CHUNK: usize = 8 * 1024;
        const CHUNKS: usize = 256;
        for flow in [Http2Flow::SMALL, Http2Flow::BATCHES] {
            let release = Arc::new(tokio::sync::Notify::new());
            let app = axum::Router::new()
                .route("/body", axum::routing::post(read_when_released))
                .with_state(release.clone());
            let limits = ConnectionLimits {
                http2_flow: flow,
                ..LIMITS
            };
            let addr = start_within(Logs::default(), app, limits);
            let (mut send, _driver) = connect(addr).await;
            // Counts the bytes the client has taken to send: it takes no more while the
            // stream's window is used up.
            let taken = Arc::new(AtomicUsize::new(0));
            let counted = taken.clone();
            let chunks = futures::stream::iter(0..CHUNKS).map(move |_| {
                counted.fetch_add(CHUNK, Ordering::Relaxed);
                Ok::<_, std::io::Error>(vec![7u8; CHUNK])
            });
            let request = Request::post("http://x/body")
                .body(Body::from_stream(chunks))
                .expect("request");
            let answer = tokio::spawn(async move { send.send_request(request).await });

            // Until the count stops moving.
            let mut last = usize::MAX;
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = taken.load(Ordering::Relaxed);
                if now == last {
                    break;
                }
                last = now;
            }
            let window = flow.stream_window() as usize;
            assert!(
                (window..=window + 2 * CHUNK).contains(&last),
                "{flow:?}: {last} bytes went ahead of the server's reading"
            );
            release.notify_one();
            let answer = answer.await.expect("task").expect("an answer");
            assert_eq!(
                text(answer).await,
                (StatusCode::OK, (CHUNK * CHUNKS).to_string()),
                "{flow:?}: the whole body arrives once read"
            );
        }
    }
}
