use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = delivery_service::Cli::parse();
    summary_backend::main::<delivery_service::Deliveries>(
        delivery_service::SERVICE_NAME,
        cli.listen,
        cli.summary,
    )
    .await
}
