use clap::Parser;

/// Every span received is decoded into many small allocations, most freed at once. In
/// `bench/run tracing`, where the viewer shares a core with the load, its intake took
/// 34-55 us of CPU per invoice with the system allocator and 13-20 us with mimalloc
/// (without huge pages: see the workspace's `Cargo.toml`). The local tuning run's
/// viewer is a mode of the `loadtest` binary, which allocates with mimalloc too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "trace-viewer",
    version,
    about = "OTLP in, Jaeger API and waterfall UI out"
)]
struct Cli {
    #[command(flatten)]
    config: trace_viewer::Config,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    trace_viewer::main(Cli::parse().config).await
}
