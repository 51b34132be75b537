use clap::Parser;

/// The drone-delivery gateway: GET /api/invoices aggregates three backends in parallel.
#[derive(Parser)]
#[command(name = "gateway", version, about)]
struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    args: gateway::GatewayArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    gateway::main(cli.listen, cli.args).await
}
