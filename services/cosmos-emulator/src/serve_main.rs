//! Running the emulator as a process.

use dronelab_contract::Service;

use crate::{run, AppState, Config};

/// The binary's `main`: logging to stderr, state (replaying `--data-dir`), then the
/// standard bind / announce / serve until SIGTERM or Ctrl-C.
pub async fn main(config: Config) -> std::process::ExitCode {
    let name = Service::CosmosEmulator.name();
    lifecycle::init_logging("info");
    let state = match AppState::new(&config) {
        Ok(state) => state,
        Err(e) => {
            eprintln!("{name}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing::info!(
        partitions = config.partitions,
        throttling = config.throttling,
        latency = config.latency,
        persistent = config.data_dir.is_some(),
        "model"
    );
    lifecycle::serve(name, config.listen, |listener, shutdown| {
        run(listener, state, shutdown)
    })
    .await
}
