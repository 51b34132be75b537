//! `lifecycle::http::serve` against real sockets: silent, slow and excess connections
//! are closed, and a client that behaves is still served.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lifecycle::http::{serve, ConnectionLimits};

const LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 4,
    header_read_timeout: Duration::from_millis(500),
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
            let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
            let _ = serve("test-server", listener, app, LIMITS, std::future::pending()).await;
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

        // Two stalled 32 KiB bodies hold the whole 64 KiB budget: a third body waits
        // for their bytes, which they give back when they time out.
        drop(read);
        let started = std::time::Instant::now();
        let half = declaring(32 * 1024);
        let first = budget.read(&half, stalled(b"a"));
        let second = budget.read(&half, stalled(b"b"));
        let third = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let read = budget.read(&declaring(10), Body::from("0123456789")).await;
            (read, started.elapsed())
        };
        let (first, second, (third, waited)) = tokio::join!(first, second, third);
        assert!(matches!(first, Err(BodyError::TooSlow { .. })), "{first:?}");
        assert!(
            matches!(second, Err(BodyError::TooSlow { .. })),
            "{second:?}"
        );
        assert!(third.is_ok(), "{third:?}");
        assert!(waited >= Duration::from_millis(250), "{waited:?}");

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
