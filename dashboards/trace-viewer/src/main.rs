use clap::Parser;

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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    trace_viewer::main(Cli::parse().config).await
}
