use clap::Parser;

/// Sums an owner's monthly drone utilization from Cosmos DB (the query under study).
#[derive(Parser)]
#[command(name = "utilization-service", version, about)]
struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8093")]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    args: utilization_service::UtilizationArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    utilization_service::main(cli.listen, cli.args).await
}
