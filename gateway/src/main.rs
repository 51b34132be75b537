use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = gateway::Cli::parse();
    gateway::main(cli.listen, cli.args).await
}
