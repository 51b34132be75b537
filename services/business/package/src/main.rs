use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = package_service::Cli::parse();
    summary_backend::main::<package_service::Packages>(
        package_service::SERVICE_NAME,
        cli.listen,
        cli.summary,
    )
    .await
}
