//! Running the emulator as a process.

use tracing_subscriber::EnvFilter;

use crate::{run, AppState, Config};

/// The binary's `main`: logging to stderr, state (replaying `--data-dir`), serve until
/// SIGTERM / Ctrl-C. The address is printed as the one line on stdout.
pub async fn main(config: Config) -> std::process::ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let state = match AppState::new(&config) {
        Ok(state) => state,
        Err(e) => {
            eprintln!("cosmos-emulator: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cosmos-emulator: cannot listen on {}: {e}", config.listen);
            return std::process::ExitCode::FAILURE;
        }
    };
    let address = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    tracing::info!(
        %address,
        partitions = config.partitions,
        throttling = config.throttling,
        latency = config.latency,
        persistent = config.data_dir.is_some(),
        "cosmos-emulator listening"
    );
    // The one line on stdout: scripts and the local stack read the address from it.
    // The one line on stdout: scripts and the local stack read the address from it.
    println!("cosmos-emulator listening on http://{address}/");
    if let Err(e) = run(listener, state, shutdown_signal()).await {
        eprintln!("cosmos-emulator: server error: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
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
    tracing::info!("shutting down");
}
