//! dronelab's trace viewer: an OTLP receiver (gRPC and HTTP) feeding a bounded in-memory
//! store, the Jaeger query API over it (so Grafana's Jaeger data source and other Jaeger
//! clients can read it), and a waterfall UI that makes 429s, retry waits and
//! serial-vs-parallel fan-out plain to see.

pub mod analysis;
pub mod api;
pub mod jaeger;
pub mod metrics;
pub mod otlp;
pub mod query;
pub mod store;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use dronelab_contract::service::{Service, OTLP_GRPC_PORT, OTLP_HTTP_PORT};
use lifecycle::http::{serve, ConnectionLimits};
use tokio::net::TcpListener;

pub use store::{Limits, Store};

/// Command-line flags (with environment fallbacks) of the `trace-viewer` binary.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Address of the UI and the Jaeger query API.
    #[arg(long, env = "TRACE_VIEWER_LISTEN", default_value_t = Service::TraceViewer.default_listen())]
    pub listen: SocketAddr,
    /// Address of the OTLP/gRPC receiver.
    #[arg(
        long,
        env = "TRACE_VIEWER_OTLP_GRPC_LISTEN",
        default_value_t = SocketAddr::from((Ipv4Addr::LOCALHOST, OTLP_GRPC_PORT))
    )]
    pub otlp_grpc_listen: SocketAddr,
    /// Address of the OTLP/HTTP receiver (`POST /v1/traces`, protobuf or JSON).
    #[arg(
        long,
        env = "TRACE_VIEWER_OTLP_HTTP_LISTEN",
        default_value_t = SocketAddr::from((Ipv4Addr::LOCALHOST, OTLP_HTTP_PORT))
    )]
    pub otlp_http_listen: SocketAddr,
    /// Most spans kept; the oldest traces are evicted beyond it.
    #[arg(long, env = "TRACE_VIEWER_MAX_SPANS", default_value_t = 1_000_000)]
    pub max_spans: usize,
    /// Most memory (MiB, estimated) the stored spans may take; oldest traces go first.
    #[arg(long, env = "TRACE_VIEWER_MAX_MIB", default_value_t = 512)]
    pub max_mib: usize,
}

impl Config {
    pub fn limits(&self) -> Limits {
        Limits {
            max_spans: self.max_spans,
            max_bytes: self.max_mib.saturating_mul(1024 * 1024),
        }
    }
}

/// The three bound listeners.
#[derive(Debug)]
pub struct Listeners {
    pub ui: TcpListener,
    pub otlp_grpc: TcpListener,
    pub otlp_http: TcpListener,
}

impl Listeners {
    pub async fn bind(config: &Config) -> std::io::Result<Self> {
        Ok(Self {
            ui: TcpListener::bind(config.listen).await?,
            otlp_grpc: TcpListener::bind(config.otlp_grpc_listen).await?,
            otlp_http: TcpListener::bind(config.otlp_http_listen).await?,
        })
    }

    /// Three free ports on 127.0.0.1 (tests, benchmarks).
    pub async fn loopback() -> std::io::Result<Self> {
        let any = || TcpListener::bind("127.0.0.1:0");
        Ok(Self {
            ui: any().await?,
            otlp_grpc: any().await?,
            otlp_http: any().await?,
        })
    }

    /// Base URLs of what is bound.
    pub fn urls(&self) -> std::io::Result<Urls> {
        let url = |l: &TcpListener| l.local_addr().map(|a| format!("http://{a}"));
        Ok(Urls {
            ui: url(&self.ui)?,
            otlp_grpc: url(&self.otlp_grpc)?,
            otlp_http: url(&self.otlp_http)?,
        })
    }
}

/// `http://host:port` of the UI/API and the two receivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Urls {
    pub ui: String,
    pub otlp_grpc: String,
    pub otlp_http: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("HTTP server: {0}")]
    Http(#[from] std::io::Error),
}

/// Serves the UI/API, the OTLP/HTTP and the OTLP/gRPC receivers until `shutdown`
/// completes.
pub async fn run(
    listeners: Listeners,
    store: Arc<Store>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    // Every listener is the same server (gRPC is HTTP/2 with prior knowledge), stopping
    // together. The receivers take whole export batches in one go: a batch held back by
    // a small HTTP/2 window costs its sender a wake-up more, on the core serving its
    // requests.
    let serve_on = |listener, router, limits| {
        let mut stop = stop_rx.clone();
        let stopped = async move {
            let _ = stop.wait_for(|stop| *stop).await;
        };
        serve(NAME, listener, router, limits, Box::pin(stopped))
    };
    let receiver = otlp::Receiver::new(store.clone());
    let batches = ConnectionLimits::batch_receiver();
    let ui = serve_on(
        listeners.ui,
        api::router(store),
        ConnectionLimits::default(),
    );
    let otlp_http = serve_on(
        listeners.otlp_http,
        otlp::http_router(receiver.clone()),
        batches,
    );
    let otlp_grpc = serve_on(listeners.otlp_grpc, otlp::grpc_router(receiver), batches);
    let (ui, otlp_http, otlp_grpc) = tokio::join!(ui, otlp_http, otlp_grpc);
    ui?;
    otlp_http?;
    otlp_grpc?;
    Ok(())
}

const NAME: &str = Service::TraceViewer.name();

/// The binary: binds its three listeners, announces them on one stdout line (the local
/// stack reads it; the UI's URL last), serves until Ctrl-C or SIGTERM. Logs go to stderr.
pub async fn main(config: Config) -> std::process::ExitCode {
    lifecycle::init_logging("info");
    let listeners = match Listeners::bind(&config).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{NAME}: cannot listen: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let Urls {
        ui,
        otlp_grpc,
        otlp_http,
    } = match listeners.urls() {
        Ok(urls) => urls,
        Err(e) => {
            eprintln!("{NAME}: cannot read the bound addresses: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let limits = config.limits();
    tracing::info!(
        max_spans = limits.max_spans,
        max_mib = config.max_mib,
        "store limits"
    );
    lifecycle::announce(
        NAME,
        &ui,
        &[("otlp-grpc", &otlp_grpc), ("otlp-http", &otlp_http)],
    );
    let store = Arc::new(Store::new(limits));
    lifecycle::exit_code(
        NAME,
        run(listeners, store, lifecycle::shutdown_signal()).await,
    )
}
