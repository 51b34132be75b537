use clap::Parser;

/// Every span received is decoded into many small allocations and most are freed at once;
/// mimalloc serves them at about half the CPU of the system allocator, which matters when
/// the viewer shares a core with the load (`bench/run tracing`). The local tuning run's
/// viewer is a mode of the `loadtest` binary, which uses it too.
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
