use clap::Parser;

/// The allocator every dronelab service binary uses (see the gateway's `main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::launch(delivery_service::Cli::parse()).await
}
