//! Running the emulator: as a process of its own ([`main`]), or inside another on a free
//! loopback port ([`InProcess`]: tests, benchmarks, tools that need a Cosmos DB).

use std::net::SocketAddr;

use dronelab_contract::Service;
use tokio::task::JoinHandle;

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

/// The emulator served from this process on `127.0.0.1:0` until dropped.
pub struct InProcess {
    pub addr: SocketAddr,
    pub state: AppState,
    task: JoinHandle<()>,
}

impl InProcess {
    /// Starts it with `config` (whose `listen` is ignored).
    pub async fn start(config: &Config) -> Result<Self, String> {
        let state = AppState::new(config).map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(|e| format!("cannot bind a loopback port: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let serving = run(listener, state.clone(), std::future::pending());
        let task = tokio::spawn(async move {
            let _ = serving.await;
        });
        Ok(Self { addr, state, task })
    }

    /// Its Cosmos endpoint, `http://127.0.0.1:<port>/`.
    pub fn endpoint(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.task.abort();
    }
}
