use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = utilization_service::Cli::parse();
    utilization_service::main(cli.listen, cli.args).await
}
