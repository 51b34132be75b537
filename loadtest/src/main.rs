use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    loadtest::cli::main(loadtest::cli::Cli::parse()).await
}
