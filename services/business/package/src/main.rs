use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::launch(package_service::Cli::parse()).await
}
