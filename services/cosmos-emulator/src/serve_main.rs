//! Running the emulator as a process.

use crate::{run, AppState, Config};

/// The binary's `main`: logging to stderr, state (replaying `--data-dir`), serve until
/// SIGTERM / Ctrl-C. The address is printed as the one line on stdout.
pub async fn main(config: Config) -> std::process::ExitCode {
    lifecycle::init_logging("info");
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
    println!("cosmos-emulator listening on http://{address}/");
    if let Err(e) = run(listener, state, lifecycle::shutdown_signal()).await {
        eprintln!("cosmos-emulator: server error: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
