use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::launch(utilization_service::Cli::parse()).await
}
