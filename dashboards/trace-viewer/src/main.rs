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
    trace_viewer::main(Cli::parse().config).await
}
