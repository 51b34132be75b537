use clap::Parser;

/// Every request allocates small, short-lived buffers (HTTP, span data); mimalloc serves
/// them faster than the system allocator (`bench/run tracing` measures the difference).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::launch(gateway::Cli::parse()).await
}
