use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::launch(gateway::Cli::parse()).await
}
