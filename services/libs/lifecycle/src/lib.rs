//! What every dronelab process shares, kept apart from `service-kit` so the emulator and
//! the trace viewer need no HTTP service plumbing: logging to stderr (text or JSON), its
//! own CPU and memory ([`process`]) and the `/metrics` it serves ([`metrics`]), the one
//! address line on stdout that the local stack reads, the shutdown signal, the bind /
//! announce / serve sequence every server process runs, and the connection limits every
//! HTTP server keeps ([`http`]); and the allocator they all use.

use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;

use tokio::net::TcpListener;

pub mod http;
pub mod metrics;
pub mod process;

/// The allocator of every dronelab process (each binary links this crate).
///
/// - mimalloc serves the small, short-lived allocations every request makes (HTTP
///   buffers, span data) faster than the system allocator: `bench/run tracing` measures
///   it. The trace viewer decodes each span into many small allocations freed together:
///   its intake took 34–55 µs of CPU per invoice with the system allocator, 13–20 µs with
///   mimalloc (without huge pages, see the workspace's `Cargo.toml`).
/// - It is set here, in a crate built at `opt-level = 3`, because the allocation entry
///   points are compiled where the allocator is declared. `loadtest`, which runs the
///   local stack's services as its own modes, is built at 0 for the first build's sake;
///   declared there, every allocation of every service went through unoptimised calls.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How log lines look: `LOG_FORMAT=json` gives one JSON object per line (with the
/// current span's fields, e.g. a request's `trace_id`), anything else plain text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The environment variable that picks the [`LogFormat`].
pub const LOG_FORMAT_ENV: &str = "LOG_FORMAT";

impl LogFormat {
    pub fn from_env() -> Self {
        match std::env::var(LOG_FORMAT_ENV) {
            Ok(v) if v.trim().eq_ignore_ascii_case("json") => Self::Json,
            _ => Self::Text,
        }
    }
}

/// `RUST_LOG`'s filter, else `default_directive` (e.g. `info`).
pub fn env_filter(default_directive: &str) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_directive))
}

/// Log lines on stderr in the [`LogFormat`] `LOG_FORMAT` asks for.
pub fn log_layer<S>() -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    match LogFormat::from_env() {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
        // Colour only on a terminal: a log file (the local stack's) gets plain text.
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
    }
}

/// `text` as one word for `sh -c`: single-quoted, with each `'` written `'\''`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Logs to stderr, filtered by `RUST_LOG`, else by `default_directive` (e.g. `info`).
pub fn init_logging(default_directive: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let _ = tracing_subscriber::registry()
        .with(log_layer())
        .with(env_filter(default_directive))
        .try_init();
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown signal received");
}

/// Prints the one line a process writes on stdout once it listens:
/// `<name> [key=value ...] listening on <url>`. The local stack reads the URL (the last
/// word) and the `key=value` addresses; everything else goes to stderr.
pub fn announce(name: &str, url: &str, extra: &[(&str, &str)]) {
    let mut line = String::from(name);
    for (key, value) in extra {
        line.push_str(&format!(" {key}={value}"));
    }
    tracing::info!("{line} listening on {url}");
    println!("{line} listening on {url}");
}

/// The exit code of a process whose server returned `result`.
pub fn exit_code<E: std::fmt::Display>(name: &str, result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: server error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How every dronelab server process runs: binds `addr`, announces its URL, serves with
/// `serve` until SIGTERM or Ctrl-C, and turns the outcome into the exit code.
pub async fn serve<F, Fut, E>(name: &str, addr: SocketAddr, serve: F) -> ExitCode
where
    F: FnOnce(TcpListener, Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("{name}: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let url = match listener.local_addr() {
        Ok(bound) => format!("http://{bound}/"),
        Err(e) => {
            eprintln!("{name}: cannot read the bound address: {e}");
            return ExitCode::FAILURE;
        }
    };
    announce(name, &url, &[]);
    exit_code(name, serve(listener, Box::pin(shutdown_signal())).await)
}

/// Completes when the process should stop (see [`shutdown_signal`]).
pub type Shutdown = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_word_reaches_the_shell_as_it_is() {
        for word in ["plain", "it's", "a b", "$(touch x)", "'", "-rf", ""] {
            let line = format!("printf %s {}", shell_quote(word));
            let out = std::process::Command::new("sh")
                .args(["-c", &line])
                .output()
                .expect("sh runs");
            assert_eq!(String::from_utf8_lossy(&out.stdout), word, "{line}");
        }
    }
}
