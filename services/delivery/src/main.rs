use clap::Parser;

/// Monthly delivery counts per owner, read from Cosmos DB.
#[derive(Parser)]
#[command(name = "delivery-service", version, about)]
struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8091")]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    summary: delivery_service::SummaryArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    service_kit::summary::main::<delivery_service::DeliverySummary>(
        delivery_service::SERVICE_NAME,
        cli.listen,
        cli.summary,
    )
    .await
}
