use clap::Parser;

/// Monthly package counts and weights per owner, read from Cosmos DB.
#[derive(Parser)]
#[command(name = "package-service", version, about)]
struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8092")]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    summary: package_service::SummaryArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    service_kit::summary::main::<package_service::PackageSummary>(
        package_service::SERVICE_NAME,
        cli.listen,
        cli.summary,
    )
    .await
}
